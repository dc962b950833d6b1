/* One handler per frame type the server sends over the WebSocket (connection.js). */
import { restoreInput } from "./composer.js";
import { announce, appendTurn, atBottom, awaitingReply, firstTurn, follow, items, onStream, place, renderHeader, setGenerating, showConversation, showNewer } from "./conversation.js";
import { toast } from "./helpers.js";
import { renderEvent, renderItem, renderNotice } from "./messages.js";
import { loadExternal } from "./panels.js";
import { forgetHeld, keepHeld, settleFlushed } from "./queue.js";
import { renderSidebar, upsertMeta } from "./sidebar.js";
import { $, state } from "./state.js";
import { setTimeZone } from "./times.js";

export const HANDLERS = {
  conversation_loaded: showConversation,
  conversation_list(msg) {
    state.conversations = new Map((msg.conversations || []).map((c) => [c.id, c]));
    state.activeMinutes = msg.activeMinutes || 60;
    setTimeZone(msg.timeZone);
    state.listHasMore = !!msg.hasMore;
    renderSidebar();
    // (the first list after connecting) escalations that came while no tab was open
    if (msg.pendingEscalations > 0 && state.panel !== "external") $("external-badge").hidden = false;
  },
  conversation_list_more(msg) {
    for (const c of msg.conversations || []) {
      if (!state.conversations.has(c.id)) state.conversations.set(c.id, c);
    }
    state.listHasMore = !!msg.hasMore;
    renderSidebar();
  },
  conversation_created(msg) {
    upsertMeta(msg.conversation, true); // the newest of all: at the top
  },
  conversation_renamed(msg) {
    const meta = state.conversations.get(msg.conversationId);
    if (meta) upsertMeta(Object.assign({}, meta, { title: msg.title, manuallyNamed: true }));
    if (state.current && state.current.id === msg.conversationId) {
      state.current = Object.assign({}, state.current, { title: msg.title });
      renderHeader();
    }
  },
  conversation_updated(msg) {
    if (msg.conversation) upsertMeta(msg.conversation);
    else if (msg.turn && state.conversations.has(msg.conversationId)) {
      const meta = state.conversations.get(msg.conversationId);
      upsertMeta(Object.assign({}, meta, { updated: msg.turn.timestamp, turnCount: Math.max(meta.turnCount || 0, msg.turn.turnNumber || 0) }));
    }
    if (!state.current || state.current.id !== msg.conversationId || state.behind) return;
    if (msg.turn) appendTurn(msg.turn);
    if (msg.event) {
      const wasAtBottom = atBottom();
      place(renderEvent(msg.event));
      follow(wasAtBottom);
    }
  },
  history(msg) {
    if (!state.current || msg.conversationId !== state.current.id) return;
    state.loadingOlder = false;
    const list = items();
    const first = list.firstChild;
    // What was in view stays in view as the older page goes in above it.
    const box = $("messages");
    const fromBottom = box.scrollHeight - box.scrollTop;
    for (const item of msg.turns || []) list.insertBefore(renderItem(item), first);
    box.scrollTop = box.scrollHeight - fromBottom;
    state.oldestTurn = firstTurn(msg.turns) || state.oldestTurn;
    state.olderThan = msg.olderThan;
    $("load-more").hidden = !msg.hasMore;
  },
  newer: showNewer,
  stream: onStream,
  reply(msg) {
    // A conversation reply is already in the transcript and arrived as its turn
    // (conversation_updated), which settled Stop; only a reply outside any
    // conversation is shown here.
    if (msg.conversationId) return;
    setGenerating(false);
    const wasAtBottom = atBottom();
    items().appendChild(renderNotice({ kind: "reply", text: msg.text, actions: msg.actions }));
    follow(wasAtBottom);
  },
  notice(msg) {
    if (msg.conversationId && state.current && msg.conversationId !== state.current.id && msg.kind !== "escalation") return;
    // "/model NAME" typed in an empty chat: the model its first message's conversation gets
    if (msg.pendingModel && !state.current) {
      state.pendingModel = msg.pendingModel;
      $("model-select").value = msg.pendingModel;
    }
    // "/rename TITLE" there: the title its first message's conversation gets
    if (msg.pendingTitle && !state.current) {
      state.pendingTitle = msg.pendingTitle;
      renderHeader();
    }
    const wasAtBottom = atBottom();
    items().appendChild(renderNotice(msg));
    announce(msg.text || "");
    $("empty-state").hidden = true;
    follow(wasAtBottom);
    if (msg.kind === "escalation") $("external-badge").hidden = false;
  },
  external_updated() {
    if (state.panel === "external") loadExternal();
    else $("external-badge").hidden = false;
  },
  accepted(msg) {
    state.ownSent = false; // its turn came first, or it has none (a command)
    if (state.unsent && msg.ref === state.unsent.ref) state.unsent = null;
    forgetHeld(msg.ref);
    settleFlushed(msg.ref, true, false);
  },
  error(msg) {
    if (msg.ref) state.ownSent = false;
    if (msg.ref && state.unsent && msg.ref === state.unsent.ref) {
      const unsent = state.unsent;
      state.unsent = null;
      setGenerating(awaitingReply());
      // a held one: it and the ones after it are back in the box (or, kept, go on)
      if (settleFlushed(msg.ref, false, !!msg.kept)) {
        if (!msg.kept) toast((msg.message || "Error") + ": not sent; your messages are back in the box.");
        return;
      }
      // not stored (a storage failure keeps it to store later: not to be sent again
      // now, only checked after a reconnect, see keepHeld)
      if (!msg.kept) {
        restoreInput(unsent.text);
        toast((msg.message || "Error") + ": not sent; your message is back in the box.");
        return;
      }
      keepHeld(unsent);
    }
    toast(msg.message || "Error");
  },
  pong() {},
};
