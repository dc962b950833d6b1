/* The WebSocket: connecting, reconnecting with backoff, the status it shows, and send().
 * Each frame that arrives goes to its handler in handlers.js. */
import { HANDLERS } from "./handlers.js";
import { sessionEnded, toast } from "./helpers.js";
import { addressView } from "./navigation.js";
import { showQueued } from "./queue.js";
import { $, state } from "./state.js";

// A network that swallows packets (a captive portal, a phone between cells) leaves a
// socket "connecting" until the browser's own TCP timeout, minutes later, with no retry
// meanwhile; past this the attempt is given up and goes the retry way.
const CONNECT_TIMEOUT_MS = 10000;

export function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  // Ask for what this tab shows (its address, or a conversation, or "new" for an empty
  // chat), not the most recent one, where the next message would otherwise go.
  const view = addressView() || (state.loaded ? (state.current ? state.current.id : "new") : null);
  const query = view ? "?conversation=" + encodeURIComponent(view) : "";
  const ws = new WebSocket(proto + "//" + location.host + "/ws" + query);
  state.ws = ws;
  setStatus("connecting…", "connecting");
  const giveUp = setTimeout(() => {
    if (ws.readyState === WebSocket.CONNECTING) ws.close(); // onclose schedules the retry
  }, CONNECT_TIMEOUT_MS);
  ws.onopen = () => {
    clearTimeout(giveUp);
    state.retry = 0;
    state.reconnected = state.connections++ > 0 || state.restored;
    state.restored = false;
    setStatus("live", "live");
  };
  ws.onmessage = (ev) => {
    let msg;
    try {
      msg = JSON.parse(ev.data);
    } catch (_e) {
      return;
    }
    const handler = HANDLERS[msg.type];
    if (handler) handler(msg);
  };
  ws.onclose = () => {
    clearTimeout(giveUp);
    if (state.ws !== ws) return;
    setStatus("offline, reconnecting…", "offline");
    // A refused upgrade may mean the session expired: the API tells us which.
    fetch("/api/conversations?limit=1", { credentials: "same-origin" })
      .then(sessionEnded)
      .catch(() => {});
    state.loadingOlder = state.loadingNewer = false; // its page is not coming: the reload brings a new one
    scheduleRetry();
    showQueued(); // "waiting for the connection"
  };
}

// Retries start fast (a daemon restarting under systemd is back within seconds) and
// back off, with jitter so tabs do not reconnect in step, to a cap that is low while
// the owner looks at the tab and higher for a tab in the background. Until session
// 26 the cap was 15 s for both: after a kill -9 and restart the page sat offline for
// up to 18 s.
const RETRY_FIRST_MS = 300;
const RETRY_CAP_VISIBLE_MS = 5000;
const RETRY_CAP_HIDDEN_MS = 30000;

function scheduleRetry() {
  const cap = document.visibilityState === "hidden" ? RETRY_CAP_HIDDEN_MS : RETRY_CAP_VISIBLE_MS;
  const delay = Math.min(RETRY_FIRST_MS * 2 ** state.retry++, cap) * (0.75 + 0.5 * Math.random());
  clearTimeout(state.retryTimer);
  state.retryAt = Date.now() + delay;
  state.retryTimer = setTimeout(() => {
    state.retryTimer = null;
    connect();
  }, delay);
  showRetry();
}

// The status says when the next attempt is, and "Retry now" tries at once.
function showRetry() {
  clearTimeout(state.countdown);
  if (!state.retryTimer) return;
  const seconds = Math.max(1, Math.ceil((state.retryAt - Date.now()) / 1000));
  setStatus("offline, reconnecting in " + seconds + " s", "offline");
  state.countdown = setTimeout(showRetry, 1000);
}

export function connected() {
  return !!state.ws && state.ws.readyState === WebSocket.OPEN;
}

// The network is back (a phone leaving a tunnel), the tab is in view again (a phone
// unlocked, a window brought back) or the owner asked: try now rather than at the end
// of the backoff.
export function reconnectNow() {
  if (!state.ws || state.ws.readyState !== WebSocket.CLOSED || !state.retryTimer) return;
  clearTimeout(state.retryTimer);
  state.retryTimer = null;
  state.retry = 0;
  connect();
}

function setStatus(text, cls) {
  const node = $("conn-status");
  node.textContent = text;
  node.className = "conn " + cls;
  document.body.dataset.connection = cls;
  $("reconnect-now").hidden = cls !== "offline";
  if (cls !== "offline") clearTimeout(state.countdown);
}

const FRAME_MAX = 1 << 20; // bytes: the server's max_msg_size (a larger frame closes the socket)

export function send(payload) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) {
    const data = JSON.stringify(payload);
    if (new Blob([data]).size > FRAME_MAX) {
      // Kept in the input: the server would drop the connection and the text with it.
      toast("Too long to send (at most 1 MB). Nothing was sent; shorten or split it.");
      return false;
    }
    state.ws.send(data);
    return true;
  }
  toast("Not connected; retrying…");
  return false;
}
