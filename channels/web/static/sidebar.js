/* The conversation list: active and recent, paged, kept in focus as it is redrawn. */
import { send } from "./connection.js";
import { renderHeader } from "./conversation.js";
import { el, icon, labelled, plural, titleOf } from "./helpers.js";
import { rove, showList, showPanel } from "./navigation.js";
import { $, state } from "./state.js";
import { relTime } from "./times.js";

export function renderSidebar() {
  // Rebuilt on every arriving turn and every 30 s: the button the keyboard was on went
  // away and focus fell back to the page, in the middle of going down the list.
  const focused = document.activeElement;
  const list = $("conversation-list");
  const focusedId = list.contains(focused) && focused.closest(".conv") ? focused.closest(".conv").dataset.id : null;
  const focusedMore = focused && focused.id === "list-more";
  const all = Array.from(state.conversations.values()).sort((a, b) => (b.updated || "").localeCompare(a.updated || ""));
  const cutoff = Date.now() - state.activeMinutes * 60000;
  const active = $("list-active");
  const recent = $("list-recent");
  active.textContent = "";
  recent.textContent = "";
  for (const c of all) {
    const li = el("li", "conv");
    li.dataset.id = c.id;
    li.dataset.channel = c.channel;
    const current = !!state.current && state.current.id === c.id;
    if (current) li.classList.add("current");
    if (c.readOnly) li.classList.add("readonly");
    const b = el("button");
    b.type = "button";
    if (current) b.setAttribute("aria-current", "true");
    b.appendChild(icon(c.channel));
    const text = el("span", "conv-text");
    const line1 = el("span", "conv-title", labelled(c.label, titleOf(c)));
    // the whole label (a long subject is sent cut, with labelFull) and title on hover
    line1.title = window.showBidiControls(labelled(c.labelFull || c.label, titleOf(c)));
    line1.dir = "auto";
    text.appendChild(line1);
    const line2 = el("span", "conv-time", relTime(c.updated) + (c.readOnly ? " · read-only" : "") + " · " + plural(c.turnCount || 0, "turn"));
    text.appendChild(line2);
    b.appendChild(text);
    b.addEventListener("click", () => {
      showPanel("chat");
      showList(false);
      state.creating = false;
      send({ type: "switch_conversation", conversationId: c.id });
    });
    li.appendChild(b);
    (Date.parse(c.updated) >= cutoff ? active : recent).appendChild(li);
  }
  if (!active.childNodes.length) active.appendChild(el("li", "muted empty-list", "Nothing in the last " + state.activeMinutes + " min"));
  if (!recent.childNodes.length) recent.appendChild(el("li", "muted empty-list", "—"));
  if (state.listHasMore) {
    // The list comes a page at a time: the older ones after what this tab holds.
    const li = el("li", "list-more");
    const more = el("button", null, "Older conversations");
    more.type = "button";
    more.id = "list-more";
    more.addEventListener("click", () => {
      more.disabled = true;
      send({ type: "list_more", offset: state.conversations.size });
    });
    li.appendChild(more);
    recent.appendChild(li);
  }
  rove(list, ".conv button");
  if (focusedId) {
    const again = list.querySelector('.conv[data-id="' + CSS.escape(focusedId) + '"] button');
    if (again) again.focus();
  } else if (focusedMore && $("list-more")) {
    $("list-more").focus();
  }
}

// Whether the list this tab holds (the newest conversations, a page at a time) has a
// place for ``meta``: one it lists, or one at least as recent as the oldest it lists.
// A start writing notes for thousands of conversations sent an update of each to every
// tab: each was added and the list rebuilt, a tab froze for seconds, and "Older
// conversations" (asking from the count held) skipped the ones it had not shown yet.
function holds(meta) {
  if (state.conversations.has(meta.id) || !state.listHasMore) return true;
  let oldest = null;
  for (const c of state.conversations.values()) {
    if (oldest === null || (c.updated || "") < oldest) oldest = c.updated || "";
  }
  return oldest === null || (meta.updated || "") >= oldest;
}

let redraw = false;

// The list redrawn once per frame, however many updates came meanwhile.
export function scheduleSidebar() {
  if (redraw) return;
  redraw = true;
  requestAnimationFrame(() => {
    redraw = false;
    renderSidebar();
  });
}

export function upsertMeta(meta, always = false) {
  if (!meta || !meta.id) return;
  const current = state.current && state.current.id === meta.id;
  if (!always && !current && !holds(meta)) return;
  state.conversations.set(meta.id, meta);
  if (current) {
    state.current = meta;
    renderHeader();
  }
  scheduleSidebar();
}
