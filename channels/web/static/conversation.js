/* The conversation in view: its page of turns, the reply streaming in, older pages,
 * the header (title, rename, model selector) and Stop. */
import { send } from "./connection.js";
import { el, icon, labelBeside, nameShown, titleOf } from "./helpers.js";
import { renderItem } from "./messages.js";
import { updateAddress } from "./navigation.js";
import { flushQueued, settleUnsent, showQueued } from "./queue.js";
import { renderSidebar } from "./sidebar.js";
import { $, state } from "./state.js";
import { setTimeZone } from "./times.js";

export function items() {
  return $("message-items");
}

export function scrollToBottom() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

// What arrives (a streamed word, a turn from another tab or channel, a note) keeps the
// view at the bottom only if it was there, or within FOLLOW_MARGIN_PX of it: until
// session 39 every one jumped there, and the owner could not scroll up to read while a
// reply streamed. Measured before the change (``atBottom()``), followed after
// (``follow()``). The owner's own message and an opened conversation still jump.
export const FOLLOW_MARGIN_PX = 80;
export function atBottom() {
  const box = $("messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight <= FOLLOW_MARGIN_PX;
}

export function follow(wasAtBottom) {
  if (wasAtBottom) scrollToBottom();
}

export function appendTurn(turn) {
  const list = items();
  // A user turn and its answer share a turn number: match on both.
  const role = turn.role === "user" ? "user" : "assistant";
  const existing = turn.turnNumber != null ? list.querySelector('.msg[data-turn="' + turn.turnNumber + '"][data-role="' + role + '"]:not(.streaming)') : null;
  if (existing) return; // already shown (a reload raced the live event)
  // The owner's own message, sent from this tab, is shown wherever the view was.
  const own = role === "user" && state.ownSent;
  if (own) state.ownSent = false;
  const wasAtBottom = own || atBottom();
  const stream = role === "assistant" ? state.streams.get(turn.turnNumber) : null;
  const node = renderItem(turn);
  if (stream) {
    list.replaceChild(node, stream.node);
    state.streams.delete(turn.turnNumber);
  } else {
    place(node);
  }
  if (turn.role === "assistant") {
    setGenerating(awaitingReply());
    announce("Reply: " + (turn.content || ""));
  }
  if (turn.role === "user" && state.current && !state.current.readOnly) setGenerating(true);
  $("empty-state").hidden = true;
  follow(wasAtBottom);
}

// A turn or note goes above a reply still being written: the reply is written to the
// transcript when complete, after it. Shown under it, a message sent while a reply
// streamed swapped places with that reply on a reload.
export function place(node) {
  const list = items();
  list.insertBefore(node, list.querySelector(":scope > .msg.streaming"));
}

// Read out by a screen reader (#announce is aria-live): a reply as it is complete,
// not every streamed word, nor a whole conversation as it loads.
export function announce(text) {
  const box = $("announce");
  box.textContent = text.length > 500 ? text.slice(0, 500) + "…" : text;
}

// A message sent while the previous one was answered is still waiting for its reply
// when that answer is complete: Stop stays for it.
export function awaitingReply() {
  if (!state.current || state.current.readOnly) return false;
  const users = items().querySelectorAll('.msg[data-role="user"]');
  const last = users[users.length - 1];
  return !!last && !items().querySelector('.msg[data-role="assistant"][data-turn="' + last.dataset.turn + '"]:not(.streaming)');
}

export function setGenerating(on) {
  // Stop pressed from the keyboard goes away with the reply it stopped: the focus on it
  // would fall to the page, and the keyboard start again from its top.
  if (!on && document.activeElement === $("stop")) $("input").focus();
  $("stop").hidden = !on;
  document.body.dataset.generating = on ? "1" : "0";
}

const STREAM_EAGER_CHARS = 2000; // drawn per delta up to here: cheap, and every word shows

export function onStream(msg) {
  if (!state.current || msg.conversationId !== state.current.id || state.behind) return;
  let s = state.streams.get(msg.turnNumber);
  if (!s && msg.done && !msg.delta) {
    // An attempt that ended before its first word (the model unreachable): nothing
    // to show; as a bubble it was an empty reply under the outage notice.
    setGenerating(awaitingReply());
    return;
  }
  if (!s) {
    if (items().querySelector('.msg[data-turn="' + msg.turnNumber + '"][data-role="assistant"]')) return;
    const wasAtBottom = atBottom();
    const node = renderItem({ role: "assistant", content: "", turnNumber: msg.turnNumber, timestamp: new Date().toISOString() });
    node.classList.add("streaming");
    items().appendChild(node);
    s = { node, text: "" };
    state.streams.set(msg.turnNumber, s);
    $("empty-state").hidden = true;
    follow(wasAtBottom);
  }
  if (s.ended && !msg.done) {
    // An attempt ended without its answer (the model went away) and the reply is being
    // tried again: the retry streams from its own beginning.
    s.text = "";
    s.ended = false;
    s.node.classList.remove("stream-done");
  }
  s.text += msg.delta || "";
  // A long reply is drawn once per animation frame, not per word: each drawing renders
  // the whole reply so far, so drawing per delta cost time quadratic in its length.
  if (msg.done || s.text.length < STREAM_EAGER_CHARS) paintStream(s);
  else if (!s.frame) s.frame = requestAnimationFrame(() => paintStream(s));
  setGenerating(!msg.done || awaitingReply());
  if (msg.done) {
    s.ended = true;
    s.node.classList.add("stream-done");
  }
}

function paintStream(s) {
  if (s.frame) cancelAnimationFrame(s.frame);
  s.frame = 0;
  const body = s.node.querySelector(".msg-body");
  const wasAtBottom = atBottom();
  body.textContent = "";
  body.appendChild(window.renderMarkdown(s.text));
  follow(wasAtBottom);
}

export function showConversation(msg) {
  setTimeZone(msg.timeZone);
  state.loaded = true;
  state.current = msg.conversation;
  // The model chosen for an empty chat belongs to the conversation its first message
  // creates: spent once one is shown, told again to a server that reconnected.
  if (msg.conversation) state.pendingModel = state.pendingTitle = null;
  else {
    if (state.pendingModel) send({ type: "set_model", model: state.pendingModel });
    if (state.pendingTitle) send({ type: "rename_conversation", title: state.pendingTitle });
  }
  updateAddress(msg.conversation);
  state.streams.clear();
  if (msg.models) state.models = msg.models;
  const list = items();
  list.textContent = "";
  for (const item of msg.turns || []) list.appendChild(renderItem(item));
  state.oldestTurn = firstTurn(msg.turns);
  state.olderThan = msg.olderThan;
  state.loadingOlder = false;
  $("load-more").hidden = !msg.hasMore;
  // Opened around an older turn: newer ones exist past this page. New turns are not
  // shown under it (they would seem to follow it directly); the button, or sending a
  // message, jumps to the latest.
  state.behind = !!msg.hasNewer;
  state.newerThan = msg.newerThan;
  state.loadingNewer = false;
  $("load-newer").hidden = !state.behind;
  $("empty-state").hidden = !!(msg.turns && msg.turns.length);
  if (state.reconnected) {
    state.reconnected = false;
    settleUnsent();
  }
  flushQueued();
  showQueued(); // still held (a refused send put it back): keep it in view
  // A reply still owed (being prepared, or waiting out an outage) keeps Stop after a
  // reload or a reconnect: it was hidden until the reply's first word arrived.
  setGenerating(awaitingReply());
  renderHeader();
  renderSidebar();
  if (msg.focusTurn != null || state.focusTurns.length) {
    highlight(state.focusTurns.length ? state.focusTurns : [msg.focusTurn]);
    state.focusTurns = [];
  } else {
    scrollToBottom();
  }
  document.body.dataset.view = "shown"; // the first view is drawn (the socket opened before)
}

export function firstTurn(list) {
  for (const it of list || []) if (it.type === "turn" && it.turnNumber != null) return it.turnNumber;
  return null;
}

function highlight(turns) {
  let first = null;
  for (const n of turns) {
    const node = items().querySelector('.msg[data-turn="' + n + '"]');
    if (node) {
      node.classList.add("matched");
      first = first || node;
    }
  }
  if (first) first.scrollIntoView({ block: "center" });
}

export function renderHeader() {
  const c = state.current;
  const readOnly = !!(c && c.readOnly);
  const named = c || (state.pendingTitle ? { title: state.pendingTitle } : null);
  $("chat-title").textContent = titleOf(named);
  $("chat-title").classList.toggle("untitled", !(named && named.title));
  const chan = $("chat-channel");
  chan.textContent = "";
  chan.appendChild(icon(c ? c.channel : "web"));
  const label = c ? labelBeside(c.label, c.title) : "";
  $("chat-label").textContent = label ? window.showBidiControls(nameShown(label)) : "";
  // A long subject is shown cut (channels/web/views.py LABEL_SHOWN): whole on hover.
  $("chat-label").title = label ? window.showBidiControls(nameShown(c.labelFull || label)) : "";
  $("readonly-badge").hidden = !readOnly;
  $("composer").hidden = readOnly;
  $("readonly-note").hidden = !readOnly;
  document.body.dataset.conversation = c ? c.id : "";
  const select = $("model-select");
  select.textContent = "";
  const notOffered = state.models.notOffered || [];
  for (const alias of state.models.aliases || []) {
    const opt = el("option", null, notOffered.includes(alias) ? alias + " (not offered)" : alias);
    opt.value = alias;
    select.appendChild(opt);
  }
  select.value = (c && c.model) || state.pendingModel || state.models.default || "";
  select.disabled = readOnly;
  $("offline-badge").hidden = !state.models.offline;
  document.title = titleOf(named) + " · my-agent";
}

// The page before the one shown, once at a time (the button, or scrolling near the
// top): the same page asked for twice was shown twice.
export const OLDER_MARGIN_PX = 300;
export function loadOlder() {
  if (state.loadingOlder || $("load-more").hidden || !state.current) return;
  // the page's cursor: "before its first turn number" skipped what lay between a
  // flood's questions and the late answers the page began with
  const id = state.current.id;
  const cursor = state.olderThan != null ? { olderThan: state.olderThan } : state.oldestTurn != null ? { beforeTurn: state.oldestTurn } : null;
  if (cursor && send({ type: "load_more", conversationId: id, ...cursor })) state.loadingOlder = true;
}

// The page after the one shown last, once at a time (scrolling near the bottom of a
// conversation opened around an old turn): until session 27 newer turns came only with
// "Jump to the latest", which left the turns between behind.
export const NEWER_MARGIN_PX = 300;
export function loadNewer() {
  if (state.loadingNewer || !state.behind || !state.current || state.newerThan == null) return;
  const id = state.current.id;
  if (send({ type: "load_newer", conversationId: id, newerThan: state.newerThan })) state.loadingNewer = true;
}

// A newer page goes in under the last: below the view, so nothing in view moves.
// The last one brings the tab up to date: new turns are shown from then on.
export function showNewer(msg) {
  if (!state.current || msg.conversationId !== state.current.id || !state.behind) return;
  state.loadingNewer = false;
  const box = $("messages");
  const top = box.scrollTop;
  for (const item of msg.turns || []) place(renderItem(item));
  state.newerThan = msg.newerThan;
  state.behind = !!msg.hasNewer;
  $("load-newer").hidden = !state.behind;
  box.scrollTop = top; // (the button under the last page, hidden, took its height away)
  if (!state.behind) setGenerating(awaitingReply());
}

export function jumpToLatest() {
  if (state.current) send({ type: "switch_conversation", conversationId: state.current.id });
}

export function startRename() {
  if (!state.current) return;
  const input = $("title-input");
  input.value = state.current.title || "";
  input.hidden = false;
  $("chat-title").hidden = true;
  input.focus();
  input.select();
}

export function finishRename(commit) {
  const input = $("title-input");
  if (input.hidden) return;
  input.hidden = true;
  $("chat-title").hidden = false;
  const title = input.value.trim();
  if (commit && state.current && title && title !== state.current.title) {
    send({ type: "rename_conversation", conversationId: state.current.id, title });
  }
}
