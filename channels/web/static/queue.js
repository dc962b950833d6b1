/* Messages typed while the socket is down: held in order (also across a reload), shown
 * as waiting, sent one at a time once connected, and settled after a reconnect. */
import { newRef, restoreInput, sendText } from "./composer.js";
import { connected } from "./connection.js";
import { items, scrollToBottom } from "./conversation.js";
import { el, toast } from "./helpers.js";
import { $, state } from "./state.js";

// Typed while the socket is down, or while earlier such messages are still going out:
// held in order, shown as waiting, and sent one at a time, each once the one before
// is stored, after the reconnected tab has reloaded its view (until session 26 only
// one was held and a second stayed in the box). Returns whether it was taken.
const QUEUE_MAX = 50;
export function queueText(text) {
  if (state.queued.length >= QUEUE_MAX) {
    toast("Not connected: " + QUEUE_MAX + " messages are waiting to be sent already. This one stays in the box.");
    return false;
  }
  state.queued.push({ ref: newRef(), text, conversationId: state.current ? state.current.id : null });
  showQueued();
  return true;
}

// The held messages outlive the page in this tab's sessionStorage: a phone's browser
// discards a tab in the background, and a reload lost them (until session 26). Not
// localStorage: they are the owner's words, and need not stay on the disk once the tab
// is closed.
const QUEUE_KEY = "my-agent-queued";
const KEPT_KEY = "my-agent-kept";
function keepQueued() {
  try {
    if (state.queued.length) sessionStorage.setItem(QUEUE_KEY, JSON.stringify(state.queued));
    else sessionStorage.removeItem(QUEUE_KEY);
    if (state.kept.length) sessionStorage.setItem(KEPT_KEY, JSON.stringify(state.kept));
    else sessionStorage.removeItem(KEPT_KEY);
  } catch (_e) {
    // storage refused (private mode, full): they are held in this page only
  }
}

// A message the daemon answered `kept` (the disk refused it; the daemon holds it and
// stores it once there is room, also across its restart) is kept here too until it is
// seen stored: after the next reconnect it goes again under its ref, and the server
// answers `accepted` (stored, not stored twice) or stores it then. Until session 39 the
// page forgot it at once, and a daemon stopped before the disk had room lost it.
export function keepHeld(held) {
  if (!state.kept.some((m) => m.ref === held.ref)) {
    state.kept.push({ ref: held.ref, text: held.text, conversationId: held.conversationId });
  }
  keepQueued();
}

export function forgetHeld(ref) {
  const before = state.kept.length;
  state.kept = state.kept.filter((m) => m.ref !== ref);
  if (state.kept.length !== before) keepQueued();
}

// A reloaded tab takes back what it held, and sends each under its own ref once its view
// is loaded: the first may have gone out before the reload, and the server, which
// knows its ref (also after a restart: the message's id), stores it once. Until
// session 38 the page guessed from the reloaded view by the text alone: a held "Yes"
// that an earlier turn had said too was taken for stored and dropped, and so was a
// held command.
export function restoreQueued() {
  state.queued = readHeld(QUEUE_KEY);
  state.kept = readHeld(KEPT_KEY);
  if (state.queued.length || state.kept.length) state.restored = true;
}

function readHeld(key) {
  let held = [];
  try {
    held = JSON.parse(sessionStorage.getItem(key) || "[]");
  } catch (_e) {
    held = [];
  }
  return (Array.isArray(held) ? held : []).filter((m) => m && typeof m.text === "string" && typeof m.ref === "string");
}

export function showQueued() {
  keepQueued();
  const old = $("queued");
  if (old) old.remove();
  if (!state.queued.length) return;
  const box = el("div", "queued");
  box.id = "queued";
  for (const held of state.queued) {
    const sending = held.ref === state.flushing;
    const node = el("div", "msg msg-user msg-queued");
    const meta = el("div", "msg-meta");
    meta.appendChild(el("span", "who", "You"));
    const why = sending ? "sending…" : connected() ? "waiting to be sent" : "waiting for the connection: sent when it is back";
    meta.appendChild(el("span", "queued-state", why));
    node.appendChild(meta);
    const body = el("div", "msg-body", held.text);
    body.dir = "auto";
    node.appendChild(body);
    if (!sending) {
      const cancel = el("button", null, "Cancel");
      cancel.type = "button";
      cancel.setAttribute("aria-label", "Cancel this waiting message (back to the box)");
      cancel.addEventListener("click", () => {
        state.queued = state.queued.filter((m) => m !== held);
        showQueued();
        restoreInput(held.text);
      });
      node.appendChild(cancel);
    }
    box.appendChild(node);
  }
  items().appendChild(box);
  $("empty-state").hidden = true;
  scrollToBottom();
}

// Called once the reconnected tab shows its view again, and as each held message is
// stored: the next one goes, once.
export function flushQueued() {
  // Not between a reconnect and its reloaded view: settleUnsent has to see first
  // whether the message in flight when the socket dropped was stored.
  while (!state.flushing && connected() && !state.reconnected && state.queued.length) {
    const held = state.queued[0];
    if (sendText(held.text, held)) {
      state.flushing = held.ref;
    } else {
      state.queued.shift(); // too long to send at all: back in the box (send() said why)
      restoreInput(held.text);
    }
  }
  showQueued();
}

// The held message in flight was answered: stored (the next goes), kept by the daemon
// (kept here too, see keepHeld; the next goes) or refused (it and every one after it go
// back in the box, in order, before anything typed since).
export function settleFlushed(ref, stored, kept) {
  if (!state.flushing || ref !== state.flushing) return false;
  state.flushing = null;
  const head = state.queued.shift();
  if (kept) keepHeld(head);
  else if (!stored) {
    const texts = [head, ...state.queued].map((m) => m.text);
    state.queued = [];
    restoreInput(texts.join("\n\n"));
  }
  flushQueued();
  return true;
}

// After a reconnect: the message sent before the connection dropped, unanswered, goes
// again under its ref, first in the queue: the server answers "accepted" without
// storing it again if it was stored (a command is not run twice either: its answer is
// keyed by the message), and stores it if not. Nothing is guessed from the view.
// The messages the daemon said it kept go first (sent before any of these), each once.
export function settleUnsent() {
  const unsent = state.unsent;
  state.unsent = null;
  if (unsent && unsent.ref === state.flushing) {
    state.flushing = null; // a held one: still first in the queue
  } else if (unsent) {
    state.queued.unshift({ ref: unsent.ref, text: unsent.text, conversationId: unsent.conversationId });
  }
  const queued = new Set(state.queued.map((m) => m.ref));
  state.queued.unshift(...state.kept.filter((m) => !queued.has(m.ref)));
  state.kept = [];
}
