/* my-agent dashboard. Plain JS, no build step, no CDN.
 *
 * Untrusted text (messages, titles, snippets, names) only ever reaches the page through
 * textContent or renderMarkdown (which builds DOM nodes): never innerHTML.
 *
 * This module wires the page's controls to the modules beside it (ES modules, loaded
 * by index.html as type="module"): state.js, helpers.js, times.js, connection.js,
 * navigation.js, messages.js, conversation.js, sidebar.js, handlers.js, composer.js,
 * queue.js, search.js and panels.js. markdown_inline.js and markdown.js stay classic
 * scripts that set window.showBidiControls and window.renderMarkdown.
 */
import { keepDraft, keepDraftSoon, restoreDraft, submitText } from "./composer.js";
import { connect, reconnectNow, send } from "./connection.js";
import { finishRename, jumpToLatest, loadNewer, loadOlder, NEWER_MARGIN_PX, OLDER_MARGIN_PX, renderHeader, startRename } from "./conversation.js";
import { arrowKeys, fitViewport, onHistory, showList, showPanel } from "./navigation.js";
import { restoreQueued } from "./queue.js";
import { runSearch } from "./search.js";
import { renderSidebar } from "./sidebar.js";
import { $, state } from "./state.js";
import { relTime } from "./times.js";

// ---------------------------------------------------------------- wiring
function init() {
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("input").value;
    if (!text.trim()) return;
    if (submitText(text)) $("input").value = "";
    keepDraft();
    // Sent with the Send button (Tab, then Enter or Space): back to the box for the
    // next message, not left on the button.
    $("input").focus();
  });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => send({ type: "stop_generation", conversationId: state.current ? state.current.id : null }));
  $("sidebar-toggle").addEventListener("click", () => showList(!document.body.classList.contains("list-open")));
  $("new-conversation").addEventListener("click", () => {
    showPanel("chat");
    showList(false);
    state.creating = false;
    send({ type: "new_conversation" });
    $("input").focus();
  });
  $("chat-title").addEventListener("click", startRename);
  $("chat-title").addEventListener("keydown", (ev) => ev.key === "Enter" && startRename());
  $("title-input").addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" && ev.key !== "Escape") return;
    finishRename(ev.key === "Enter");
    // back to the title: the box vanished with the focus in it, which fell to the page
    $("chat-title").focus();
  });
  $("title-input").addEventListener("blur", () => finishRename(true));
  $("model-select").addEventListener("change", (ev) => {
    state.pendingModel = ev.target.value;
    send({ type: "set_model", model: ev.target.value });
  });
  $("load-newer").addEventListener("click", jumpToLatest);
  $("load-more").addEventListener("click", loadOlder);
  // Scrolled near the top: the older page comes without a click (until session 26
  // each 50 of a 5,000-turn conversation took a click on the button); near the bottom
  // of a conversation opened around an old turn, the newer page does.
  $("messages").addEventListener("scroll", () => {
    const box = $("messages");
    if (box.scrollTop < OLDER_MARGIN_PX) loadOlder();
    if (box.scrollHeight - box.scrollTop - box.clientHeight < NEWER_MARGIN_PX) loadNewer();
  }, { passive: true });
  for (const b of document.querySelectorAll("#panel-nav button"))
    b.addEventListener("click", () => {
      showList(false);
      showPanel(b.dataset.panel);
    });
  $("search-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    runSearch(false);
  });
  $("search-more").addEventListener("click", () => runSearch(true));
  setInterval(() => {
    renderSidebar();
    for (const t of document.querySelectorAll("time.when")) t.textContent = relTime(t.dateTime);
  }, 30000);
  window.addEventListener("popstate", onHistory);
  window.addEventListener("online", reconnectNow);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") reconnectNow();
    else keepDraft(); // a hidden tab may be discarded without a pagehide
  });
  $("reconnect-now").addEventListener("click", reconnectNow);
  if (window.visualViewport) {
    window.visualViewport.addEventListener("resize", fitViewport);
    window.visualViewport.addEventListener("scroll", fitViewport);
    $("input").addEventListener("blur", fitViewport);
    fitViewport();
  }
  arrowKeys($("conversation-list"), ".conv button, #list-more", ".conv button");
  arrowKeys($("search-results"), ".result-title", ".result-title");
  renderHeader();
  restoreQueued();
  restoreDraft();
  $("input").addEventListener("input", keepDraftSoon);
  window.addEventListener("pagehide", keepDraft);
  connect();
}

document.addEventListener("DOMContentLoaded", init);
