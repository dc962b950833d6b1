/* The message box: sending what is typed, and keeping the draft across reloads. */
import { connected, send } from "./connection.js";
import { jumpToLatest, scrollToBottom, setGenerating } from "./conversation.js";
import { flushQueued, queueText } from "./queue.js";
import { $, state } from "./state.js";

export function newRef() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2);
}

// ``held``: a message from the queue, sent under its own ref into the conversation it
// was typed in (a resend after a drop keeps the ref, so the server stores it once).
export function sendText(text, held) {
  // Sent from a page of older turns: show the latest first, where the message goes.
  if (state.behind) jumpToLatest();
  const ref = held ? held.ref : newRef();
  const conversationId = held ? held.conversationId : state.current ? state.current.id : null;
  const ok = send({ type: "send_message", text, ref, conversationId });
  if (ok) state.unsent = { ref, text, conversationId };
  // The owner's own message is shown where it goes, also when the view was scrolled up
  // (its turn, when it comes back, too: see appendTurn).
  if (ok) {
    state.ownSent = true;
    scrollToBottom();
  }
  if (ok && !state.current) state.creating = true; // the empty chat becomes its conversation
  if (ok && state.current && !state.current.readOnly && !text.startsWith("/")) setGenerating(true);
  return ok;
}

// The owner's message: sent now, or held when the socket is down; behind messages
// still waiting to go out, a new one waits its turn too. Returns whether it was taken.
export function submitText(text) {
  const taken = connected() && !state.queued.length ? sendText(text) : queueText(text);
  flushQueued();
  return taken;
}

// What is in the box outlives the page the same way: a message put back in the box, or
// half typed, was lost with a reload or a discarded tab.
// Written a moment after typing stops, and at once when the page is hidden or left:
// a write of a long draft on every keystroke made typing in it slow. One over
// DRAFT_MAX characters (a pasted log) is not kept.
const DRAFT_KEY = "my-agent-draft";
const DRAFT_MAX = 100000;
let draftTimer = null;
export function keepDraftSoon() {
  clearTimeout(draftTimer);
  draftTimer = setTimeout(keepDraft, 400);
}

export function keepDraft() {
  clearTimeout(draftTimer);
  try {
    const text = $("input").value;
    if (text && text.length <= DRAFT_MAX) sessionStorage.setItem(DRAFT_KEY, text);
    else sessionStorage.removeItem(DRAFT_KEY);
  } catch (_e) {
    // storage refused: the box keeps it in this page only
  }
}

export function restoreDraft() {
  try {
    const text = sessionStorage.getItem(DRAFT_KEY);
    if (text && !$("input").value) $("input").value = text;
  } catch (_e) {
    // nothing kept
  }
}

// Puts a message that was not sent back in the box, before anything typed since.
export function restoreInput(text) {
  const input = $("input");
  if (input.value === text) return;
  input.value = input.value.trim() ? text + "\n\n" + input.value : text;
  keepDraft();
}
