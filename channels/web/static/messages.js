/* How turns, notes and notices are drawn: a cut turn's "Show all", a failed answer's
 * "Ask again", and what "/search" and "/status" typed in the chat show. */
import { sendText, submitText } from "./composer.js";
import { send } from "./connection.js";
import { CHANNEL_NAMES, el, icon, kb, nameShown, sessionEnded, toast } from "./helpers.js";
import { state } from "./state.js";
import { dateTime, relTime } from "./times.js";

export function renderItem(item) {
  if (item.type === "event") return renderEvent(item);
  const node = el("div", "msg msg-" + (item.role === "user" ? "user" : "assistant"));
  if (item.turnNumber != null) node.dataset.turn = item.turnNumber;
  node.dataset.role = item.role === "user" ? "user" : "assistant";
  const meta = el("div", "msg-meta");
  let who = "Assistant";
  if (item.role === "user") {
    who = "You";
    if (item.channel && item.channel !== "web") {
      const name = (state.current && state.current.channel === item.channel && state.current.label) || item.sender || "Owner";
      who = nameShown(name) + " via " + (CHANNEL_NAMES[item.channel] || item.channel);
    }
  }
  meta.appendChild(el("span", "who", who));
  // Written by the daemon's offline brain (no language model configured): said beside
  // the name too, not only in the reply's first line, which read as the model's words.
  if (item.role !== "user" && item.model === "offline") meta.appendChild(el("span", "tag", "offline · no model"));
  if (item.timestamp) {
    const time = el("time", "when", relTime(item.timestamp));
    time.dateTime = item.timestamp;
    time.title = dateTime(item.timestamp);
    meta.appendChild(time);
  }
  node.appendChild(meta);
  const body = el("div", "msg-body");
  body.appendChild(window.renderMarkdown(item.content || ""));
  node.appendChild(body);
  if (item.cut) node.appendChild(renderCut(item, body));
  if (item.error && item.role !== "user") markFailed(node, meta, item);
  return node;
}

// The apology written when the model failed on a question looked like any answer:
// marked as an error, with "Ask again", which sends the question once more.
function markFailed(node, meta, item) {
  node.classList.add("msg-error");
  meta.appendChild(el("span", "error-tag", "not answered: an error"));
  if (item.turnNumber == null || (state.current && state.current.readOnly)) return;
  const again = el("button", null, "Ask again");
  again.type = "button";
  again.addEventListener("click", async () => {
    if (!state.current) return;
    again.disabled = true;
    const url = "/api/conversations/" + encodeURIComponent(state.current.id) + "/turns/" + item.turnNumber + "?role=user";
    try {
      const r = await fetch(url, { credentials: "same-origin" });
      if (sessionEnded(r)) return;
      if (!r.ok) throw new Error("HTTP " + r.status);
      const question = (await r.json()).turn.content || "";
      if (!submitText(question)) again.disabled = false;
    } catch (err) {
      again.disabled = false;
      toast("Could not find the question to ask again: " + err.message);
    }
  });
  node.appendChild(again);
}

// A turn too long for one page arrives cut (channels/web/pages.py): say so, and fetch
// the whole of it on request.
function renderCut(item, body) {
  const bar = el("div", "msg-cut");
  bar.appendChild(el("span", "muted", "Showing the first " + kb(item.cut.shown) + " of " + kb(item.cut.total) + " characters. "));
  const button = el("button", null, "Show all");
  button.type = "button";
  button.addEventListener("click", async () => {
    if (!state.current) return;
    button.disabled = true;
    const url = "/api/conversations/" + encodeURIComponent(state.current.id) + "/turns/" + item.turnNumber + "?role=" + encodeURIComponent(item.role);
    try {
      const r = await fetch(url, { credentials: "same-origin" });
      if (sessionEnded(r)) return;
      if (!r.ok) throw new Error("HTTP " + r.status);
      const data = await r.json();
      body.replaceChildren(window.renderMarkdown(data.turn.content || ""));
      bar.remove();
    } catch (err) {
      button.disabled = false;
      toast("Could not load the whole message: " + err.message);
    }
  });
  bar.appendChild(button);
  return bar;
}

const EVENT_LABELS = {
  compression: (e) => "Earlier turns compressed" + (e.compressedThrough ? " (through turn " + e.compressedThrough + ")" : ""),
  abbreviation: (e) => "Abbreviated for search" + (e.throughTurn ? " (through turn " + e.throughTurn + ")" : ""),
  title_assigned: (e) => "Named “" + (e.text || "") + "”",
  meta_update: (e) => (e.title ? "Renamed “" + e.title + "”" : e.model ? "Model set to " + e.model : e.pinned === false ? "Unpinned from its channel (continuable here)" : "Conversation details updated"),
  escalation: () => "Escalation from an external contact",
  model_changed: (e) => "Model changed" + (e.text ? " to " + e.text : ""),
  unpinned: () => "Unpinned from its channel (continuable here)",
  pinned: () => "Pinned to its channel",
  error: () => "Error",
};

export function renderEvent(item) {
  const details = el("details", "note note-" + item.event);
  const label = (EVENT_LABELS[item.event] || (() => item.event))(item);
  details.appendChild(el("summary", null, label));
  const body = el("div", "note-body");
  if (item.text) body.appendChild(window.renderMarkdown(item.text));
  if (item.topics && item.topics.length) body.appendChild(el("p", "muted", "Topics: " + item.topics.join(", ")));
  if (!body.childNodes.length) body.appendChild(el("p", "muted", "(no details)"));
  details.appendChild(body);
  return details;
}

export function renderNotice(msg) {
  const node = el("div", "msg msg-notice notice-" + msg.kind);
  if (msg.results) node.appendChild(renderFound(msg));
  else if (msg.statusLines) node.appendChild(renderStatus(msg.statusLines));
  else node.appendChild(window.renderMarkdown(msg.text || ""));
  if (msg.actions && msg.actions.length) {
    const row = el("div", "actions");
    for (const [label, command] of msg.actions) {
      const b = el("button", null, label);
      b.type = "button";
      b.title = command;
      b.addEventListener("click", () => sendText(command));
      row.appendChild(b);
    }
    node.appendChild(row);
  }
  return node;
}

// "/search" typed in the chat: each result a link that opens its conversation around
// the matched turn, as in the Search panel (the text the other channels get names
// conversations by id, which the page cannot open).
function renderFound(msg) {
  const frag = document.createDocumentFragment();
  frag.appendChild(el("p", null, msg.heading || ""));
  const list = el("ol", "found");
  for (const res of msg.results) {
    const li = el("li");
    li.dir = "auto";
    li.appendChild(icon(res.channel));
    const link = el("a", "found-title", res.title || "New conversation");
    link.href = "#c=" + encodeURIComponent(res.conversationId);
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      state.focusTurns = res.focusTurn != null ? [res.focusTurn] : [];
      send({ type: "switch_conversation", conversationId: res.conversationId, aroundTurn: res.focusTurn });
    });
    li.appendChild(link);
    li.appendChild(el("span", "muted", " " + [res.day, res.turnRange].filter(Boolean).join(", ")));
    // listed after the matches, sharing no word and not close in meaning: marked as the
    // other channels' text marks it (it read as a match here)
    if (res.unrelated) li.appendChild(el("span", "muted found-unrelated", " (probably unrelated)"));
    if (res.snippet) li.appendChild(el("div", "found-snippet", res.snippet));
    list.appendChild(li);
  }
  frag.appendChild(list);
  // "5 shown: 2 of 2 matches, 3 of 32 probably unrelated": without it the owner took
  // the five for all there were
  if (msg.footer) frag.appendChild(el("p", "muted found-count", msg.footer));
  return frag;
}

// "/status" typed in the chat: its lines as text, the conversation's line a link that
// opens it by its title (the text the other channels get names it by its id).
function renderStatus(lines) {
  const p = el("p");
  lines.forEach((line, i) => {
    if (i) p.appendChild(document.createElement("br"));
    if (typeof line === "string") {
      p.appendChild(document.createTextNode(window.showBidiControls(line)));
      return;
    }
    p.appendChild(document.createTextNode(window.showBidiControls(line.prefix || "")));
    const link = el("a", "status-conversation", line.title || "New conversation");
    link.href = "#c=" + encodeURIComponent(line.conversationId);
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      send({ type: "switch_conversation", conversationId: line.conversationId });
    });
    p.appendChild(link);
  });
  return p;
}
