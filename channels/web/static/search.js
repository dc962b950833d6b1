/* The Search panel: the query, its filters, pages of results, and opening one. */
import { send } from "./connection.js";
import { el, icon, labelled, sessionEnded, titleOf } from "./helpers.js";
import { rove, showPanel } from "./navigation.js";
import { $, state } from "./state.js";
import { dateTime, relTime } from "./times.js";

const SEARCH_MAX = 1000; // characters, as the input's maxlength
let searchSeq = 0;
function searchParams() {
  // Capped like the input: a query of many kilobytes would not fit a request line.
  const q = $("search-input").value.trim().slice(0, SEARCH_MAX);
  if (!q) return null;
  const params = new URLSearchParams({ q });
  if ($("search-channel").value) params.set("channel", $("search-channel").value);
  if ($("search-conversation").value) params.set("conversation", $("search-conversation").value);
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

// The conversation filter offers the conversation in the chat (and keeps the one chosen
// before, if the chat moved on): until session 27 the panel could not search within one
// conversation, which the API and /search could.
export function offerConversations() {
  const select = $("search-conversation");
  const chosen = select.value;
  const kept = chosen ? select.querySelector('option[value="' + CSS.escape(chosen) + '"]') : null;
  select.textContent = "";
  select.appendChild(el("option", null, "Every conversation")).value = "";
  const c = state.current;
  if (c) select.appendChild(el("option", null, "In “" + titleOf(c) + "”")).value = c.id;
  if (kept && (!c || c.id !== chosen)) select.appendChild(kept);
  select.value = chosen;
}

// What a search that found nothing was limited to, for its status.
function filtersOf(params) {
  const parts = [];
  if (params.get("channel")) parts.push($("search-channel").selectedOptions[0].textContent);
  if (params.get("conversation")) parts.push("one conversation");
  if (params.get("from")) parts.push("from " + params.get("from"));
  if (params.get("to")) parts.push("to " + params.get("to"));
  return parts.length ? " (" + parts.join(", ") + ")" : "";
}

export async function runSearch(more) {
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
    if (sessionEnded(r)) return;
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
  for (const res of page.results) list.appendChild(renderResult(res, page.match));
  rove(list, ".result-title");
  // total_exact false: more turns match than the ranking read; "more" lists the rest.
  // The loosely related listed after the matches (page.loose) are counted apart: "57
  // conversations found" counted every nearest one the vector stage listed.
  const loose = page.loose || 0;
  const matches = page.total - loose;
  const exact = page.total_exact !== false;
  const method = page.method ? " (" + page.method + ")" : "";
  let status = matches > 0
    ? matches + (exact ? "" : "+") + " conversation" + (matches === 1 && exact ? "" : "s") + " found" + method
    : "No conversation found" + method;
  // (a page of nothing but those says so below, with the match)
  if (loose && matches > 0) status += ", " + loose + " more probably unrelated";
  // "0 conversations found (keyword)" read like a fault of the search
  const nothing = !more && !page.results.length;
  if (nothing) {
    const shown = window.showBidiControls(q.length > 80 ? q.slice(0, 80) + "…" : q);
    status = "Nothing found for “" + shown + "”" + filtersOf(params);
  }
  // The listing stops at a bound (bot/search/tail.py TAIL_LIMIT) with more still
  // matching: say so, or the last page read as the end of the matches.
  if (!page.next_cursor && page.total_exact === false) status += ". More match than can be listed: use more words, or a channel or date filter, to reach the rest.";
  // Scores are relative (the first result scores 1): say when none shares a word
  // with the query, and when none is close in meaning either (SearchPage.match).
  if (page.match === "date") status += ". None uses these words: those of the dates they name.";
  if (page.match === "meaning") status += ". None uses these words: the closest by meaning.";
  if (page.match === "loose") status += ". Nothing uses these words or comes close in meaning: the nearest, probably unrelated.";
  // Vectors missing (rebuilt after a new model, or some failed to embed and wait for the
  // retry): a miss by meaning is not a miss (bot/search/results.py vectors_note).
  if (page.vectors_incomplete) status += ". Search by meaning is " + (page.vectors_rebuilding ? "being rebuilt" : "incomplete: some conversations have no vectors yet") + "; some are found by their words only.";
  if (nothing && !page.match && !page.vectors_incomplete) status += ".";
  // Keyword-only (no embedding model): "Nothing found" dropped the "(keyword)" the
  // count carries, where /search, my-agent search and the offline reply all say it
  // (session 39).
  if (nothing && page.method && page.method !== "hybrid") status += " Keyword search only: conversations that say it in other words are missed.";
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

function renderResult(res, pageMatch) {
  const li = el("li", "result");
  li.dataset.id = res.conversation_id;
  const head = el("div", "result-head");
  head.appendChild(icon(res.channel));
  const title = el("a", "result-title", labelled(res.label, res.title || "New conversation"));
  title.title = window.showBidiControls(labelled(res.labelFull || res.label, res.title || "New conversation"));
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
  // listed after the matches, sharing no word and not close in meaning (its own match;
  // a page loose as a whole says it once, in the status line)
  const unrelated = res.match === "loose" && pageMatch !== "loose";
  const matched = res.turn_range ? "Matched: " + res.turn_range : "";
  li.appendChild(el("p", "muted", unrelated ? (matched ? matched + " · " : "") + "probably unrelated" : matched));
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
