/* Where the owner is: the address (#c=ID, Back and Forward), the panel shown, the
 * phone's folding list and on-screen keyboard, and arrow keys in lists. */
import { send } from "./connection.js";
import { loadAnalytics, loadExternal } from "./panels.js";
import { offerConversations } from "./search.js";
import { $, state } from "./state.js";

// The on-screen keyboard of a phone shrinks the visual viewport only: the page kept its
// full height and the composer sat under the keyboard. The app takes the visible height.
// With the keyboard open the phone's bar folds to its first row (the status and
// Conversations): its three rows of 44 px tap targets left the chat 200 px.
let fullHeight = { width: 0, height: 0 }; // the tallest visible height at this width
export function fitViewport() {
  const vv = window.visualViewport;
  if (!vv) return;
  const height = Math.round(vv.height * (vv.scale || 1));
  document.documentElement.style.setProperty("--app-height", height + "px");
  if (vv.offsetTop && document.activeElement === $("input")) window.scrollTo(0, 0);
  if (fullHeight.width !== vv.width) fullHeight = { width: vv.width, height: 0 };
  fullHeight.height = Math.max(fullHeight.height, height);
  const typing = document.activeElement === $("input") && height < 0.75 * fullHeight.height;
  document.body.classList.toggle("keyboard-open", typing);
}

// The address names the conversation in view (#c=ID, #new for an empty chat): Back and
// Forward move between conversations, and a refresh keeps the one shown.
function addressOf(conv) {
  return conv ? "#c=" + encodeURIComponent(conv.id) : "#new";
}

export function addressView() {
  const hash = location.hash.slice(1);
  return hash === "new" ? "new" : new URLSearchParams(hash).get("c");
}

export function updateAddress(conv) {
  const address = addressOf(conv);
  // The first view, one reached through Back/Forward, and an empty chat that became
  // its conversation replace the entry; any other view is a new one.
  const replace = !state.addressed || state.navigating || state.creating;
  state.addressed = true;
  state.navigating = state.creating = false;
  if (location.hash === address) return;
  if (replace) history.replaceState(null, "", address);
  else history.pushState(null, "", address);
}

export function onHistory() {
  const view = addressView();
  if (!view) return;
  state.navigating = true;
  state.creating = false;
  showPanel("chat");
  if (view === "new") send({ type: "new_conversation" });
  else send({ type: "switch_conversation", conversationId: view });
}

// Up and Down (Home, End) move between the entries of a list, as in a menu; Tab
// leaves it. The list is one Tab stop (``roving`` entries): with every entry a stop,
// the message box lay 200 Tabs past the sidebar (1,000 after paging on).
export function arrowKeys(container, selector, roving) {
  container.addEventListener("focusin", (ev) => {
    if (ev.target.matches(roving)) rove(container, roving, ev.target);
  });
  container.addEventListener("keydown", (ev) => {
    if (!["ArrowDown", "ArrowUp", "Home", "End"].includes(ev.key)) return;
    const entries = Array.from(container.querySelectorAll(selector));
    const at = entries.indexOf(document.activeElement);
    if (at < 0 || !entries.length) return;
    ev.preventDefault();
    let next = ev.key === "ArrowDown" ? at + 1 : ev.key === "ArrowUp" ? at - 1 : ev.key === "Home" ? 0 : entries.length - 1;
    next = Math.max(0, Math.min(entries.length - 1, next));
    entries[next].focus();
  });
}

// The one entry of a list that Tab stops at: the one given, else the one that was the
// stop already, the current conversation, or the first.
export function rove(container, selector, stop) {
  const entries = Array.from(container.querySelectorAll(selector));
  stop = stop || entries.find((e) => e.getAttribute("tabindex") === "0") ||
    entries.find((e) => e.getAttribute("aria-current") === "true") || entries[0];
  for (const e of entries) e.tabIndex = e === stop ? 0 : -1;
}

// On a phone the conversation list folds away above the chat (style.css).
export function showList(open) {
  document.body.classList.toggle("list-open", open);
  $("sidebar-toggle").setAttribute("aria-expanded", open ? "true" : "false");
}

export function showPanel(name) {
  state.panel = name;
  for (const section of document.querySelectorAll("main > .panel")) section.hidden = section.id !== "panel-" + name;
  for (const b of document.querySelectorAll("#panel-nav button")) b.classList.toggle("active", b.dataset.panel === name);
  if (name === "external") {
    $("external-badge").hidden = true;
    loadExternal();
  } else if (name === "analytics") {
    loadAnalytics();
  } else if (name === "search") {
    offerConversations();
    $("search-input").focus();
  }
}
