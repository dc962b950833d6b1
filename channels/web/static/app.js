/* my-agent dashboard. Plain JS, no build step, no CDN.
 *
 * Untrusted text (messages, titles, snippets, names) only ever reaches the page through
 * textContent or renderMarkdown (which builds DOM nodes): never innerHTML.
 */
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const state = {
    ws: null,
    retry: 0,
    conversations: new Map(),
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
    // Messages typed while the socket was down ({ref, text, conversationId}, in order):
    // shown as waiting and sent one by one once the tab is connected again.
    queued: [],
    flushing: null, // the ref of the held message in flight
    loadingOlder: false, // a load_more is on its way
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
    focusTurns: [],
    panel: "chat",
    search: { query: null, params: null, cursor: null }, // the query shown and its next page
  };

  // ---------------------------------------------------------------- DOM helpers
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = window.showBidiControls(text);
    return node;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  const ICONS = {
    web: ["circle:12,12,9", "M3 12h18", "M12 3c3.2 3.6 3.2 14.4 0 18", "M12 3c-3.2 3.6-3.2 14.4 0 18"],
    telegram: ["M21.5 4.5 2.8 11.6l5.9 2.1 2.2 6.4 3.2-3.7 4.9 3.6z", "M8.7 13.7 21.5 4.5"],
    email: ["rect:3,5,18,14", "M3.5 6.5 12 13l8.5-6.5"],
    other: ["circle:12,12,4"],
  };
  const CHANNEL_NAMES = { web: "Web", telegram: "Telegram", email: "E-mail" };

  function icon(channel) {
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("class", "icon icon-" + (ICONS[channel] ? channel : "other"));
    svg.setAttribute("aria-label", CHANNEL_NAMES[channel] || channel);
    svg.setAttribute("role", "img");
    for (const part of ICONS[channel] || ICONS.other) {
      let node;
      if (part.startsWith("circle:")) {
        const [cx, cy, r] = part.slice(7).split(",");
        node = document.createElementNS(SVG_NS, "circle");
        node.setAttribute("cx", cx);
        node.setAttribute("cy", cy);
        node.setAttribute("r", r);
      } else if (part.startsWith("rect:")) {
        const [x, y, w, h] = part.slice(5).split(",");
        node = document.createElementNS(SVG_NS, "rect");
        node.setAttribute("x", x);
        node.setAttribute("y", y);
        node.setAttribute("width", w);
        node.setAttribute("height", h);
        node.setAttribute("rx", "2");
      } else {
        node = document.createElementNS(SVG_NS, "path");
        node.setAttribute("d", part);
      }
      svg.appendChild(node);
    }
    return svg;
  }

  // Formatters in the owner's zone, made once per zone (Intl resolves DST per moment).
  const formats = new Map();
  function formatIn(kind, ts) {
    const key = kind + "|" + (state.timeZone || "");
    let format = formats.get(key);
    if (!format) {
      const options = kind === "date"
        ? { year: "numeric", month: "short", day: "numeric" }
        : { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short" };
      try {
        format = new Intl.DateTimeFormat(undefined, Object.assign({ timeZone: state.timeZone || undefined }, options));
      } catch (e) { // a zone this browser does not know: its own, rather than nothing
        format = new Intl.DateTimeFormat(undefined, options);
      }
      formats.set(key, format);
    }
    return format.format(new Date(ts));
  }
  const dateTime = (ts) => formatIn("time", ts);

  function setTimeZone(zone) {
    if (!zone || zone === state.timeZone) return;
    state.timeZone = zone;
    // times already shown were in the browser's zone (their days too)
    for (const t of document.querySelectorAll("time.when")) {
      t.title = dateTime(t.dateTime);
      t.textContent = relTime(t.dateTime);
    }
  }

  // The calendar day of a moment in the owner's zone, as a count of days.
  const dayFormats = new Map();
  function dayNumber(t) {
    const zone = state.timeZone || "";
    let format = dayFormats.get(zone);
    if (!format) {
      const options = { year: "numeric", month: "numeric", day: "numeric" };
      try {
        format = new Intl.DateTimeFormat("en-US", Object.assign({ timeZone: zone || undefined }, options));
      } catch (e) { // a zone this browser does not know: its own
        format = new Intl.DateTimeFormat("en-US", options);
      }
      dayFormats.set(zone, format);
    }
    const parts = {};
    for (const p of format.formatToParts(new Date(t))) parts[p.type] = Number(p.value);
    return Math.round(Date.UTC(parts.year, parts.month - 1, parts.day) / 86400000);
  }

  // "yesterday" is the owner's previous calendar day (owner.timezone), "N h ago" today
  // and "N days ago" counts calendar days: 24-48 hours ago was "yesterday", so at 09:00
  // last night's 23:30 read "10 h ago" and the morning before yesterday's "yesterday".
  function relTime(ts) {
    if (!ts) return "";
    const t = Date.parse(ts);
    if (isNaN(t)) return "";
    const now = Date.now();
    const s = Math.max(0, (now - t) / 1000);
    if (s < 45) return "just now";
    if (s < 3600) return Math.round(s / 60) + " min ago";
    const days = Math.max(0, dayNumber(now) - dayNumber(t));
    if (days === 0) return Math.round(s / 3600) + " h ago";
    if (days === 1) return "yesterday";
    if (days < 30) return days + " days ago";
    return formatIn("date", t);
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  function titleOf(meta) {
    return window.showBidiControls((meta && meta.title) || "New conversation");
  }

  // Hebrew, Arabic, Syriac, Thaana, N'Ko... (the strong right-to-left blocks)
  const RTL = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]|\uD802[\uDC00-\uDFFF]|\uD803[\uDC00-\uDE7F]|\uD83A[\uDC00-\uDFFF]|\uD83B[\uDC00-\uDEFF]/;

  // "label · title": the title in a first-strong isolate when it holds right-to-left
  // letters, so that an Arabic or Hebrew title after an English contact (or a number
  // at the end of one) does not reorder the label and the dot around it.
  function labelled(label, title) {
    if (!label) return title;
    return label + " · " + (RTL.test(title) ? "\u2068" + title + "\u2069" : title);
  }

  let toastTimer = null;
  function toast(text) {
    const box = $("toast");
    box.textContent = window.showBidiControls(text);
    box.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => (box.hidden = true), 4000);
  }

  // ---------------------------------------------------------------- WebSocket
  function connect() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    // Ask for what this tab shows (its address, or a conversation, or "new" for an empty
    // chat), not the most recent one, where the next message would otherwise go.
    const view = addressView() || (state.loaded ? (state.current ? state.current.id : "new") : null);
    const query = view ? "?conversation=" + encodeURIComponent(view) : "";
    const ws = new WebSocket(proto + "//" + location.host + "/ws" + query);
    state.ws = ws;
    setStatus("connecting…", "connecting");
    ws.onopen = () => {
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
      if (state.ws !== ws) return;
      setStatus("offline, reconnecting…", "offline");
      // A refused upgrade may mean the session expired: the API tells us which.
      fetch("/api/conversations?limit=1", { credentials: "same-origin" })
        .then((r) => {
          if (r.status === 401) location.href = "/login";
        })
        .catch(() => {});
      state.loadingOlder = false; // its page is not coming: the reload brings a new one
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

  function connected() {
    return !!state.ws && state.ws.readyState === WebSocket.OPEN;
  }

  // The network is back (a phone leaving a tunnel), the tab is in view again (a phone
  // unlocked, a window brought back) or the owner asked: try now rather than at the end
  // of the backoff.
  function reconnectNow() {
    if (!state.ws || state.ws.readyState !== WebSocket.CLOSED || !state.retryTimer) return;
    clearTimeout(state.retryTimer);
    state.retryTimer = null;
    state.retry = 0;
    connect();
  }

  // The on-screen keyboard of a phone shrinks the visual viewport only: the page kept its
  // full height and the composer sat under the keyboard. The app takes the visible height.
  // With the keyboard open the phone's bar folds to its first row (the status and
  // Conversations): its three rows of 44 px tap targets left the chat 200 px.
  let fullHeight = { width: 0, height: 0 }; // the tallest visible height at this width
  function fitViewport() {
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

  // ---------------------------------------------------------------- address
  // The address names the conversation in view (#c=ID, #new for an empty chat): Back and
  // Forward move between conversations, and a refresh keeps the one shown.
  function addressOf(conv) {
    return conv ? "#c=" + encodeURIComponent(conv.id) : "#new";
  }

  function addressView() {
    const hash = location.hash.slice(1);
    return hash === "new" ? "new" : new URLSearchParams(hash).get("c");
  }

  function updateAddress(conv) {
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

  function onHistory() {
    const view = addressView();
    if (!view) return;
    state.navigating = true;
    state.creating = false;
    showPanel("chat");
    if (view === "new") send({ type: "new_conversation" });
    else send({ type: "switch_conversation", conversationId: view });
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

  function send(payload) {
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

  // ---------------------------------------------------------------- chat rendering
  function renderItem(item) {
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
        who = name + " via " + (CHANNEL_NAMES[item.channel] || item.channel);
      }
    }
    meta.appendChild(el("span", "who", who));
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

  function kb(chars) {
    return chars >= 1048576 ? (chars / 1048576).toFixed(1) + " M" : chars >= 1024 ? Math.round(chars / 1024) + " K" : String(chars);
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

  function renderEvent(item) {
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

  function renderNotice(msg) {
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
      if (res.snippet) li.appendChild(el("div", "found-snippet", res.snippet));
      list.appendChild(li);
    }
    frag.appendChild(list);
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

  function items() {
    return $("message-items");
  }

  function scrollToBottom() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  function appendTurn(turn) {
    const list = items();
    // A user turn and its answer share a turn number: match on both.
    const role = turn.role === "user" ? "user" : "assistant";
    const existing = turn.turnNumber != null ? list.querySelector('.msg[data-turn="' + turn.turnNumber + '"][data-role="' + role + '"]:not(.streaming)') : null;
    if (existing) return; // already shown (a reload raced the live event)
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
    scrollToBottom();
  }

  // A turn or note goes above a reply still being written: the reply is written to the
  // transcript when complete, after it. Shown under it, a message sent while a reply
  // streamed swapped places with that reply on a reload.
  function place(node) {
    const list = items();
    list.insertBefore(node, list.querySelector(":scope > .msg.streaming"));
  }

  // Read out by a screen reader (#announce is aria-live): a reply as it is complete,
  // not every streamed word, nor a whole conversation as it loads.
  function announce(text) {
    const box = $("announce");
    box.textContent = text.length > 500 ? text.slice(0, 500) + "…" : text;
  }

  // A message sent while the previous one was answered is still waiting for its reply
  // when that answer is complete: Stop stays for it.
  function awaitingReply() {
    if (!state.current || state.current.readOnly) return false;
    const users = items().querySelectorAll('.msg[data-role="user"]');
    const last = users[users.length - 1];
    return !!last && !items().querySelector('.msg[data-role="assistant"][data-turn="' + last.dataset.turn + '"]:not(.streaming)');
  }

  function setGenerating(on) {
    $("stop").hidden = !on;
    document.body.dataset.generating = on ? "1" : "0";
  }

  const STREAM_EAGER_CHARS = 2000; // drawn per delta up to here: cheap, and every word shows

  function onStream(msg) {
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
      const node = renderItem({ role: "assistant", content: "", turnNumber: msg.turnNumber, timestamp: new Date().toISOString() });
      node.classList.add("streaming");
      items().appendChild(node);
      s = { node, text: "" };
      state.streams.set(msg.turnNumber, s);
      $("empty-state").hidden = true;
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
    body.textContent = "";
    body.appendChild(window.renderMarkdown(s.text));
    scrollToBottom();
  }

  function showConversation(msg) {
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
    $("load-newer").hidden = !state.behind;
    $("empty-state").hidden = !!(msg.turns && msg.turns.length);
    if (state.reconnected) {
      state.reconnected = false;
      settleUnsent(msg.turns);
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
  }

  function firstTurn(list) {
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

  function renderHeader() {
    const c = state.current;
    const readOnly = !!(c && c.readOnly);
    const named = c || (state.pendingTitle ? { title: state.pendingTitle } : null);
    $("chat-title").textContent = titleOf(named);
    $("chat-title").classList.toggle("untitled", !(named && named.title));
    const chan = $("chat-channel");
    chan.textContent = "";
    chan.appendChild(icon(c ? c.channel : "web"));
    $("chat-label").textContent = c && c.label ? window.showBidiControls(c.label) : "";
    $("readonly-badge").hidden = !readOnly;
    $("composer").hidden = readOnly;
    $("readonly-note").hidden = !readOnly;
    document.body.dataset.conversation = c ? c.id : "";
    const select = $("model-select");
    select.textContent = "";
    for (const alias of state.models.aliases || []) {
      const opt = el("option", null, alias);
      opt.value = alias;
      select.appendChild(opt);
    }
    select.value = (c && c.model) || state.pendingModel || state.models.default || "";
    select.disabled = readOnly;
    document.title = titleOf(named) + " · my-agent";
  }

  // ---------------------------------------------------------------- sidebar
  function renderSidebar() {
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
      line1.title = titleOf(c);
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

  // Up and Down (Home, End) move between the entries of a list, as in a menu; Tab
  // leaves it. The list is one Tab stop (``roving`` entries): with every entry a stop,
  // the message box lay 200 Tabs past the sidebar (1,000 after paging on).
  function arrowKeys(container, selector, roving) {
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
  function rove(container, selector, stop) {
    const entries = Array.from(container.querySelectorAll(selector));
    stop = stop || entries.find((e) => e.getAttribute("tabindex") === "0") ||
      entries.find((e) => e.getAttribute("aria-current") === "true") || entries[0];
    for (const e of entries) e.tabIndex = e === stop ? 0 : -1;
  }

  // On a phone the conversation list folds away above the chat (style.css).
  function showList(open) {
    document.body.classList.toggle("list-open", open);
    $("sidebar-toggle").setAttribute("aria-expanded", open ? "true" : "false");
  }

  function upsertMeta(meta) {
    if (!meta || !meta.id) return;
    state.conversations.set(meta.id, meta);
    if (state.current && state.current.id === meta.id) {
      state.current = meta;
      renderHeader();
    }
    renderSidebar();
  }

  // ---------------------------------------------------------------- protocol handlers
  const HANDLERS = {
    conversation_loaded: showConversation,
    conversation_list(msg) {
      state.conversations = new Map((msg.conversations || []).map((c) => [c.id, c]));
      state.activeMinutes = msg.activeMinutes || 60;
      setTimeZone(msg.timeZone);
      state.listHasMore = !!msg.hasMore;
      renderSidebar();
    },
    conversation_list_more(msg) {
      for (const c of msg.conversations || []) {
        if (!state.conversations.has(c.id)) state.conversations.set(c.id, c);
      }
      state.listHasMore = !!msg.hasMore;
      renderSidebar();
    },
    conversation_created(msg) {
      upsertMeta(msg.conversation);
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
        place(renderEvent(msg.event));
        scrollToBottom();
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
    stream: onStream,
    reply(msg) {
      // A conversation reply is already in the transcript and arrived as its turn
      // (conversation_updated), which settled Stop; only a reply outside any
      // conversation is shown here.
      if (msg.conversationId) return;
      setGenerating(false);
      items().appendChild(renderNotice({ kind: "reply", text: msg.text, actions: msg.actions }));
      scrollToBottom();
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
      items().appendChild(renderNotice(msg));
      announce(msg.text || "");
      $("empty-state").hidden = true;
      scrollToBottom();
      if (msg.kind === "escalation") $("external-badge").hidden = false;
    },
    external_updated() {
      if (state.panel === "external") loadExternal();
      else $("external-badge").hidden = false;
    },
    accepted(msg) {
      if (state.unsent && msg.ref === state.unsent.ref) state.unsent = null;
      settleFlushed(msg.ref, true);
    },
    error(msg) {
      if (msg.ref && state.unsent && msg.ref === state.unsent.ref) {
        const unsent = state.unsent;
        state.unsent = null;
        setGenerating(awaitingReply());
        // a held one: it and the ones after it are back in the box (or, kept, go on)
        if (settleFlushed(msg.ref, !!msg.kept)) {
          if (!msg.kept) toast((msg.message || "Error") + ": not sent; your messages are back in the box.");
          return;
        }
        // not stored (a storage failure keeps it to store later: not to be sent again)
        if (!msg.kept) {
          restoreInput(unsent.text);
          toast((msg.message || "Error") + ": not sent; your message is back in the box.");
          return;
        }
      }
      toast(msg.message || "Error");
    },
    pong() {},
  };

  // ---------------------------------------------------------------- actions
  // The page before the one shown, once at a time (the button, or scrolling near the
  // top): the same page asked for twice was shown twice.
  const OLDER_MARGIN_PX = 300;
  function loadOlder() {
    if (state.loadingOlder || $("load-more").hidden || !state.current) return;
    // the page's cursor: "before its first turn number" skipped what lay between a
    // flood's questions and the late answers the page began with
    const id = state.current.id;
    const cursor = state.olderThan != null ? { olderThan: state.olderThan } : state.oldestTurn != null ? { beforeTurn: state.oldestTurn } : null;
    if (cursor && send({ type: "load_more", conversationId: id, ...cursor })) state.loadingOlder = true;
  }

  function jumpToLatest() {
    if (state.current) send({ type: "switch_conversation", conversationId: state.current.id });
  }

  function newRef() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2);
  }

  // ``held``: a message from the queue, sent under its own ref into the conversation it
  // was typed in (a resend after a drop keeps the ref, so the server stores it once).
  function sendText(text, held) {
    // Sent from a page of older turns: show the latest first, where the message goes.
    if (state.behind) jumpToLatest();
    const ref = held ? held.ref : newRef();
    const conversationId = held ? held.conversationId : state.current ? state.current.id : null;
    const ok = send({ type: "send_message", text, ref, conversationId });
    if (ok) state.unsent = { ref, text };
    if (ok && !state.current) state.creating = true; // the empty chat becomes its conversation
    if (ok && state.current && !state.current.readOnly && !text.startsWith("/")) setGenerating(true);
    return ok;
  }

  // The owner's message: sent now, or held when the socket is down; behind messages
  // still waiting to go out, a new one waits its turn too. Returns whether it was taken.
  function submitText(text) {
    const taken = connected() && !state.queued.length ? sendText(text) : queueText(text);
    flushQueued();
    return taken;
  }

  // Typed while the socket is down, or while earlier such messages are still going out:
  // held in order, shown as waiting, and sent one at a time, each once the one before
  // is stored, after the reconnected tab has reloaded its view (until session 26 only
  // one was held and a second stayed in the box). Returns whether it was taken.
  const QUEUE_MAX = 50;
  function queueText(text) {
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
  function keepQueued() {
    try {
      if (state.queued.length) sessionStorage.setItem(QUEUE_KEY, JSON.stringify(state.queued));
      else sessionStorage.removeItem(QUEUE_KEY);
    } catch (_e) {
      // storage refused (private mode, full): they are held in this page only
    }
  }

  // What is in the box outlives the page the same way: a message put back in the box, or
  // half typed, was lost with a reload or a discarded tab.
  // Written a moment after typing stops, and at once when the page is hidden or left:
  // a write of a long draft on every keystroke made typing in it slow. One over
  // DRAFT_MAX characters (a pasted log) is not kept.
  const DRAFT_KEY = "my-agent-draft";
  const DRAFT_MAX = 100000;
  let draftTimer = null;
  function keepDraftSoon() {
    clearTimeout(draftTimer);
    draftTimer = setTimeout(keepDraft, 400);
  }

  function keepDraft() {
    clearTimeout(draftTimer);
    try {
      const text = $("input").value;
      if (text && text.length <= DRAFT_MAX) sessionStorage.setItem(DRAFT_KEY, text);
      else sessionStorage.removeItem(DRAFT_KEY);
    } catch (_e) {
      // storage refused: the box keeps it in this page only
    }
  }

  function restoreDraft() {
    try {
      const text = sessionStorage.getItem(DRAFT_KEY);
      if (text && !$("input").value) $("input").value = text;
    } catch (_e) {
      // nothing kept
    }
  }

  // A reloaded tab takes back what it held. The first of them may have gone out before
  // the reload: the first view loaded says whether it is stored (settleUnsent), and the
  // server knows its ref, so it is stored once.
  function restoreQueued() {
    let kept = [];
    try {
      kept = JSON.parse(sessionStorage.getItem(QUEUE_KEY) || "[]");
    } catch (_e) {
      kept = [];
    }
    state.queued = (Array.isArray(kept) ? kept : []).filter((m) => m && typeof m.text === "string" && typeof m.ref === "string");
    if (!state.queued.length) return;
    const head = state.queued[0];
    state.unsent = { ref: head.ref, text: head.text };
    state.flushing = head.ref;
    state.restored = true;
  }

  function showQueued() {
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
  function flushQueued() {
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

  // The held message in flight was answered: stored (the next goes) or refused (it and
  // every one after it go back in the box, in order, before anything typed since).
  function settleFlushed(ref, stored) {
    if (!state.flushing || ref !== state.flushing) return false;
    state.flushing = null;
    const head = state.queued.shift();
    if (!stored) {
      const texts = [head, ...state.queued].map((m) => m.text);
      state.queued = [];
      restoreInput(texts.join("\n\n"));
    }
    flushQueued();
    return true;
  }

  // Puts a message that was not sent back in the box, before anything typed since.
  function restoreInput(text) {
    const input = $("input");
    if (input.value === text) return;
    input.value = input.value.trim() ? text + "\n\n" + input.value : text;
    keepDraft();
  }

  // After a reconnect: the message sent before the connection dropped is either in the
  // conversation now (stored) or back in the box. A held one not stored stays first in
  // the queue and is sent again under its ref. A command is not put back, as it may
  // have run.
  function settleUnsent(turns) {
    const unsent = state.unsent;
    state.unsent = null;
    if (!unsent) return;
    const stored = (turns || []).some((t) => t.type === "turn" && t.role === "user" && t.content === unsent.text);
    if (unsent.ref === state.flushing) {
      state.flushing = null;
      if (stored || unsent.text.trim().startsWith("/")) state.queued.shift();
      return;
    }
    if (stored || unsent.text.trim().startsWith("/")) return;
    restoreInput(unsent.text);
    toast("The connection dropped before your message was stored: it is back in the box.");
  }

  function startRename() {
    if (!state.current) return;
    const input = $("title-input");
    input.value = state.current.title || "";
    input.hidden = false;
    $("chat-title").hidden = true;
    input.focus();
    input.select();
  }

  function finishRename(commit) {
    const input = $("title-input");
    if (input.hidden) return;
    input.hidden = true;
    $("chat-title").hidden = false;
    const title = input.value.trim();
    if (commit && state.current && title && title !== state.current.title) {
      send({ type: "rename_conversation", conversationId: state.current.id, title });
    }
  }

  function showPanel(name) {
    state.panel = name;
    for (const section of document.querySelectorAll("main > .panel")) section.hidden = section.id !== "panel-" + name;
    for (const b of document.querySelectorAll("#panel-nav button")) b.classList.toggle("active", b.dataset.panel === name);
    if (name === "external") {
      $("external-badge").hidden = true;
      loadExternal();
    } else if (name === "analytics") {
      loadAnalytics();
    } else if (name === "search") {
      $("search-input").focus();
    }
  }

  // ---------------------------------------------------------------- search
  const SEARCH_MAX = 1000; // characters, as the input's maxlength
  let searchSeq = 0;
  function searchParams() {
    // Capped like the input: a query of many kilobytes would not fit a request line.
    const q = $("search-input").value.trim().slice(0, SEARCH_MAX);
    if (!q) return null;
    const params = new URLSearchParams({ q });
    if ($("search-channel").value) params.set("channel", $("search-channel").value);
    const from = $("search-from").value;
    const to = $("search-to").value;
    if (from && to && from > to) return { error: "The start date " + from + " is after the end date " + to + "." };
    // A day of the date pickers is a day of the owner's calendar (owner.timezone, as
    // the times shown): sent as the date, which the server reads in that zone. Turned
    // into UTC moments here, it was the browser's day.
    if (from) params.set("from", from);
    if (to) params.set("to", to);
    return { q, params };
  }

  async function runSearch(more) {
    // Only the latest request is shown: an earlier, slower one must not replace its
    // results (nor a double-clicked "More results" add one page twice).
    const seq = ++searchSeq;
    let q, params;
    if (more) {
      // the next page of the query shown, with its filters (not the inputs' new ones)
      q = state.search.query;
      if (!q || !state.search.cursor) return;
      params = new URLSearchParams(state.search.params);
      params.set("cursor", state.search.cursor);
    } else {
      const built = searchParams();
      if (!built) return;
      if (built.error) return searchFailed(false, built.error);
      ({ q, params } = built);
    }
    $("search-status").textContent = "Searching…";
    let r, page;
    try {
      r = await fetch("/api/search?" + params, { credentials: "same-origin" });
      if (r.status === 401) return (location.href = "/login");
      // An error from the HTTP layer itself is plain text, not our JSON.
      page = await r.json().catch(() => ({ error: "Search failed (HTTP " + r.status + ")" }));
    } catch (err) {
      if (seq === searchSeq) searchFailed(more, "Search failed: the daemon cannot be reached");
      return;
    }
    if (seq !== searchSeq) return;
    if (!r.ok) {
      searchFailed(more, page.error || "Search failed");
      return;
    }
    const list = $("search-results");
    if (!more) list.textContent = "";
    state.search = { query: q, params: params.toString(), cursor: page.next_cursor };
    for (const res of page.results) list.appendChild(renderResult(res));
    rove(list, ".result-title");
    // total_exact false: more turns match than the ranking read; "more" lists the rest
    const total = page.total + (page.total_exact === false ? "+" : "");
    let status = total + " conversation" + (page.total === 1 && page.total_exact !== false ? "" : "s") + " found" + (page.method ? " (" + page.method + ")" : "");
    // The listing stops at a bound (bot/search/tail.py TAIL_LIMIT) with more still
    // matching: say so, or the last page read as the end of the matches.
    if (!page.next_cursor && page.total_exact === false) status += ". More match than can be listed: use more words, or a channel or date filter, to reach the rest.";
    // Scores are relative (the first result scores 1): say when none shares a word
    // with the query, and when none is close in meaning either (SearchPage.match).
    if (page.match === "meaning") status += ". None uses these words: the closest by meaning.";
    if (page.match === "loose") status += ". Nothing uses these words or comes close in meaning: the nearest, probably unrelated.";
    if (page.no_words) status = "Nothing to search for: type words to look for.";
    $("search-status").textContent = status;
    $("search-more").hidden = !page.next_cursor;
  }

  function searchFailed(more, message) {
    $("search-status").textContent = message;
    // A new query that failed has no results: the previous query's must not look like
    // its answer (a failed "more" keeps the pages already shown).
    if (!more) {
      $("search-results").textContent = "";
      $("search-more").hidden = true;
      state.search = { query: null, params: null, cursor: null };
    }
  }

  function renderResult(res) {
    const li = el("li", "result");
    li.dataset.id = res.conversation_id;
    const head = el("div", "result-head");
    head.appendChild(icon(res.channel));
    const title = el("a", "result-title", labelled(res.label, res.title || "New conversation"));
    title.href = "#c=" + res.conversation_id;
    title.dir = "auto";
    head.appendChild(title);
    const when = el("time", "muted", res.timestamp ? dateTime(res.timestamp) + " · " + relTime(res.timestamp) : "");
    head.appendChild(when);
    li.appendChild(head);
    if (res.topics && res.topics.length) {
      const tags = el("div", "tags");
      for (const t of res.topics) tags.appendChild(el("span", "tag", t));
      li.appendChild(tags);
    }
    const snippet = el("p", "snippet", res.snippet || res.abbreviation || "");
    snippet.dir = "auto";
    li.appendChild(snippet);
    li.appendChild(el("p", "muted", res.turn_range ? "Matched: " + res.turn_range : ""));
    const open = (ev) => {
      ev.preventDefault();
      state.focusTurns = res.matched_turns || [];
      showPanel("chat");
      // around the turn the snippet shows, not the first matched (maybe far before it)
      const around = res.focus_turn != null ? res.focus_turn : (res.matched_turns || [])[0];
      send({ type: "switch_conversation", conversationId: res.conversation_id, aroundTurn: around });
    };
    title.addEventListener("click", open);
    li.addEventListener("dblclick", open);
    return li;
  }

  // ---------------------------------------------------------------- external
  async function postJSON(url, body) {
    const r = await fetch(url, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (r.status === 401) location.href = "/login";
    if (!r.ok) {
      let message = "Request failed";
      try {
        message = (await r.json()).error || message;
      } catch (_e) {}
      toast(message);
    }
    return r.ok;
  }

  async function loadExternal() {
    const r = await fetch("/api/external", { credentials: "same-origin" });
    if (r.status === 401) return (location.href = "/login");
    const data = await r.json();
    const box = $("external-list");
    box.textContent = "";
    if (!data.parties.length) box.appendChild(el("p", "muted", "Nobody has written yet."));
    for (const p of data.parties) box.appendChild(renderParty(p));
  }

  function renderParty(p) {
    const card = el("article", "party tier-" + p.tier);
    card.dataset.party = p.id;
    const head = el("header");
    head.appendChild(icon(p.channel));
    head.appendChild(el("strong", null, p.name || p.identity));
    if (p.name) head.appendChild(el("span", "muted", p.identity));
    head.appendChild(el("span", "tier tag", p.tier));
    // Both directions, each named: the count alone was taken for the whole exchange.
    const counts = plural(p.messageCount, "message") + " (" + p.messagesIn + " in, " + p.messagesOut + " out)";
    head.appendChild(el("span", "muted party-count", counts + " · " + relTime(p.updated)));
    card.appendChild(head);
    for (const e of p.escalations) {
      const esc = el("div", "escalation");
      esc.appendChild(el("strong", null, "Pending escalation "));
      esc.appendChild(el("span", null, e.text));
      card.appendChild(esc);
    }
    const log = el("ul", "party-messages");
    for (const m of p.messages) {
      const li = el("li", "dir-" + m.direction);
      li.appendChild(el("span", "muted", (m.direction === "in" ? "← " : "→ ") + relTime(m.timestamp) + " "));
      li.appendChild(el("span", null, m.content));
      log.appendChild(li);
    }
    card.appendChild(log);
    const actions = el("div", "actions");
    const tierButton = (label, tier) => {
      const b = el("button", "tier-" + tier, label);
      b.type = "button";
      b.disabled = p.tier === tier;
      b.addEventListener("click", async () => {
        if (await postJSON("/api/external/" + encodeURIComponent(p.id) + "/tier", { tier })) loadExternal();
      });
      return b;
    };
    actions.appendChild(tierButton("Trust", "known"));
    actions.appendChild(tierButton("Untrust", "untrusted"));
    actions.appendChild(tierButton("Block", "blocked"));
    const reply = el("form", "reply");
    const input = el("input");
    input.placeholder = "Reply to " + window.showBidiControls(p.name || p.identity);
    const go = el("button", null, "Reply");
    go.type = "submit";
    reply.appendChild(input);
    reply.appendChild(go);
    reply.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const text = input.value.trim();
      if (text && (await postJSON("/api/external/" + encodeURIComponent(p.id) + "/reply", { text }))) {
        input.value = "";
        loadExternal();
      }
    });
    actions.appendChild(reply);
    card.appendChild(actions);
    return card;
  }

  // ---------------------------------------------------------------- analytics
  async function loadAnalytics() {
    const stamp = Date.now();
    for (const name of ["conversations", "channels", "topics"]) $("chart-" + name).src = "/analytics/" + name + ".svg?t=" + stamp;
    const r = await fetch("/api/analytics", { credentials: "same-origin" });
    if (!r.ok) return;
    const t = await r.json();
    const box = $("analytics-totals");
    box.textContent = "";
    const stat = (label, value) => {
      const d = el("div", "stat");
      d.appendChild(el("div", "stat-value", String(value)));
      d.appendChild(el("div", "muted", label));
      box.appendChild(d);
    };
    stat("conversations", t.conversations);
    stat("turns", t.turns);
    stat("cost (USD)", "$" + Number(t.cost).toFixed(4));
    stat("tokens in / out", t.tokensIn + " / " + t.tokensOut);
  }

  // ---------------------------------------------------------------- wiring
  function init() {
    $("composer").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("input").value;
      if (!text.trim()) return;
      if (submitText(text)) $("input").value = "";
      keepDraft();
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
    // each 50 of a 5,000-turn conversation took a click on the button).
    $("messages").addEventListener("scroll", () => {
      if ($("messages").scrollTop < OLDER_MARGIN_PX) loadOlder();
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
})();
