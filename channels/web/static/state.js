/* What the tab holds: the one state object every module reads and updates, and $. */
export const $ = (id) => document.getElementById(id);
export const state = {
  ws: null,
  retry: 0,
  conversations: new Map(),
  listHasMore: false, // the server has older conversations than the list shows
  activeMinutes: 60,
  // The owner's time zone (owner.timezone, sent with the list and each conversation):
  // times are the owner's day, not the browser's (a laptop abroad, a phone on another
  // zone). Until it arrives, or if the browser does not know it, the browser's.
  timeZone: null,
  current: null, // ConversationMeta or null (empty chat)
  loaded: false, // a conversation_loaded arrived: a reconnect asks for the same view
  addressed: false, // the address names the view (see updateAddress)
  navigating: false, // a view asked for by Back/Forward is on its way
  creating: false, // a first message was sent from the empty chat
  models: { aliases: [], default: null },
  pendingModel: null,
  pendingTitle: null, // "/rename" typed in an empty chat: its first message's conversation's title
  // The message sent and not yet confirmed stored ({ref, text}): the box was cleared on
  // sending, so a refusal or a connection lost before it was stored lost the text.
  unsent: null,
  ownSent: false, // this tab sent a message whose turn has not come back yet: shown at the bottom
  // Messages typed while the socket was down ({ref, text, conversationId}, in order):
  // shown as waiting and sent one by one once the tab is connected again.
  queued: [],
  flushing: null, // the ref of the held message in flight
  // Messages the daemon holds, not stored yet (a full disk: `kept`), {ref, text,
  // conversationId}: sent again under their refs after the next reconnect, until one is
  // answered `accepted` (stored by then, or now).
  kept: [],
  loadingOlder: false, // a load_more is on its way
  loadingNewer: false, // a load_newer is on its way
  restored: false, // held messages came back from sessionStorage: check the first
  retryTimer: null,
  retryAt: 0,
  countdown: null,
  connections: 0,
  reconnected: false, // the next conversation_loaded answers a reconnect
  behind: false, // the page shows older turns only (opened around a search result)
  streams: new Map(), // turnNumber -> {node, text}
  oldestTurn: null,
  olderThan: null,
  newerThan: null, // where the page after the last one shown begins (while behind)
  focusTurns: [],
  panel: "chat",
  search: { query: null, params: null, cursor: null }, // the query shown and its next page
};
