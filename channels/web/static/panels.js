/* The External panel (people who are not the owner, their tiers, replies) and Analytics. */
import { el, icon, nameShown, plural, sessionEnded, toast } from "./helpers.js";
import { $ } from "./state.js";
import { relTime } from "./times.js";

async function postJSON(url, body) {
  const r = await fetch(url, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (sessionEnded(r)) return false;
  if (!r.ok) {
    let message = "Request failed";
    try {
      message = (await r.json()).error || message;
    } catch (_e) {}
    toast(message);
    return false;
  }
  try {
    return (await r.json()) || {};
  } catch (_e) {
    return {};
  }
}

// The panel lists parties a page at a time, those with a pending escalation first (the
// server's order). Before session 41 it showed the 200 most recently active and no more:
// the longest-waiting escalations, of parties quiet since, could not be reached from it.
const EXTERNAL_PAGE = 200;
const EXTERNAL_MAX = 500; // the most /api/external gives in one request
let externalShown = 0; // how many of the server's list this tab holds
let externalLoads = 0; // the latest load: an older one's answer is dropped

async function fetchParties(offset, want) {
  const parties = [];
  let total = 0;
  while (parties.length < want) {
    const limit = Math.min(EXTERNAL_MAX, want - parties.length);
    const r = await fetch("/api/external?offset=" + (offset + parties.length) + "&limit=" + limit, { credentials: "same-origin" });
    if (sessionEnded(r) || !r.ok) return null;
    const data = await r.json();
    total = data.total;
    parties.push(...data.parties);
    // fewer than asked: the server's own bound (the rest come by "Older parties")
    if (!data.hasMore || data.parties.length < limit) break;
  }
  return { parties, total };
}

// ``more``: the next page after what the panel shows ("Older parties"); otherwise the
// panel again from the top, as many as it showed (after Trust, Reply, a party's change).
export async function loadExternal(more = false) {
  const load = ++externalLoads;
  const offset = more ? externalShown : 0;
  const page = await fetchParties(offset, more ? EXTERNAL_PAGE : Math.max(EXTERNAL_PAGE, externalShown));
  if (load !== externalLoads) return;
  if (!page) {
    if (more && $("external-more")) $("external-more").disabled = false; // to try again
    return;
  }
  const box = $("external-list");
  const focusedMore = document.activeElement && document.activeElement.id === "external-more";
  if (more) {
    const old = $("external-more");
    if (old) old.parentNode.remove();
  } else {
    box.textContent = "";
  }
  externalShown = offset + page.parties.length;
  if (!externalShown) box.appendChild(el("p", "muted", "Nobody has written yet."));
  for (const p of page.parties) {
    // the order moved between pages (a party wrote meanwhile): drawn once
    if (more && box.querySelector('.party[data-party="' + CSS.escape(p.id) + '"]')) continue;
    box.appendChild(renderParty(p));
  }
  if (externalShown < page.total) {
    const row = el("p", "list-more");
    const button = el("button", null, "Older parties");
    button.type = "button";
    button.id = "external-more";
    button.addEventListener("click", () => {
      button.disabled = true;
      loadExternal(true);
    });
    row.appendChild(button);
    row.appendChild(el("span", "muted", " " + externalShown + " of " + page.total + " shown"));
    box.appendChild(row);
    if (focusedMore) button.focus();
  }
}

const NAME_CHARS = 120;

function renderParty(p) {
  const card = el("article", "party tier-" + p.tier);
  card.dataset.party = p.id;
  const head = el("header");
  head.appendChild(icon(p.channel));
  // A stranger's name is theirs to choose: one of 3,000 characters filled the screen.
  // Cut (between code points), and whole in its tooltip.
  const name = nameShown(p.name || p.identity);
  const chars = Array.from(name);
  const strong = head.appendChild(el("strong", null, chars.length > NAME_CHARS ? chars.slice(0, NAME_CHARS).join("") + "…" : name));
  strong.title = name;
  if (p.name) head.appendChild(el("span", "muted", nameShown(p.identity)));
  head.appendChild(el("span", "tier tag", p.tier));
  // Both directions, each named: the count alone was taken for the whole exchange.
  const counts = plural(p.messageCount, "message") + " (" + p.messagesIn + " in, " + p.messagesOut + " out)";
  // what the model's answers to them cost (counted nowhere before session 40)
  const cost = Number(p.cost || 0);
  const spent = cost > 0 ? " · answers " + (cost < 0.00005 ? "< $0.0001" : "$" + cost.toFixed(4)) : "";
  head.appendChild(el("span", "muted party-count", counts + spent + " · " + relTime(p.updated)));
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
    // A mail not verified as theirs (a known contact's address anyone can forge): drawn
    // like their real messages, it passed for theirs once its escalation was resolved.
    if (m.kind === "unverified") li.appendChild(el("span", "tag unverified", "not verified as theirs"));
    // A model's answer taken back unsent when the owner blocked them (session 41: it
    // was drawn as said to them).
    if (m.kind === "withdrawn") li.appendChild(el("span", "tag withdrawn", "withdrawn, not sent"));
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
  input.placeholder = "Reply to " + window.showBidiControls(nameShown(p.name || p.identity));
  const go = el("button", null, "Reply");
  go.type = "submit";
  reply.appendChild(input);
  // A mail's other recipients get the owner's words only when asked (/replyall):
  // unchecked, the reply goes to the party alone (session 41).
  let everyone = null;
  if (p.channel === "email") {
    const label = el("label", "reply-all", " to all");
    everyone = el("input");
    everyone.type = "checkbox";
    label.title = "Also to everyone else their last mail went to (To and Cc), as a mail client's Reply All";
    label.prepend(everyone);
    reply.appendChild(label);
  }
  reply.appendChild(go);
  // One ref per reply, kept while the same words are sent again (a second click, a
  // retry after an error): the server queues a ref once (session 40: it sent twice).
  let pending = null;
  reply.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const all = Boolean(everyone && everyone.checked);
    if (!pending || pending.text !== text || pending.all !== all) pending = { text, all, ref: Date.now().toString(36) + Math.random().toString(36).slice(2) };
    const done = await postJSON("/api/external/" + encodeURIComponent(p.id) + "/reply", { text, ref: pending.ref, all });
    if (done) {
      pending = null;
      input.value = "";
      if (everyone) everyone.checked = false;
      if (done.sent) toast(done.sent); // where it went, as /reply's confirmation says
      loadExternal();
    }
  });
  actions.appendChild(reply);
  card.appendChild(actions);
  return card;
}

export async function loadAnalytics() {
  const stamp = Date.now();
  for (const name of ["conversations", "channels", "topics"]) $("chart-" + name).src = "/analytics/" + name + ".svg?t=" + stamp;
  const r = await fetch("/api/analytics", { credentials: "same-origin" });
  if (sessionEnded(r) || !r.ok) return;
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
  // (a cost under a hundredth of a cent read "$0.0000", and 1234567 tokens had no
  // separators, before session 40; bot/brain/cost.py shown_usd is the same)
  const usd = (n) => {
    const cost = Number(n);
    return cost > 0 && cost < 0.00005 ? "< $0.0001" : "$" + cost.toFixed(4);
  };
  stat("cost (USD)", usd(t.cost));
  const count = (n) => Number(n).toLocaleString("en-US");
  stat("tokens in / out", count(t.tokensIn) + " / " + count(t.tokensOut));
  // The model's answers to known contacts, in no conversation (counted nowhere before
  // session 40): the same sums as /status's "Known contacts' answers" line.
  const p = t.parties || { cost: 0, tokensIn: 0, tokensOut: 0 };
  stat("known contacts' answers (USD)", usd(p.cost));
  stat("their tokens in / out", count(p.tokensIn) + " / " + count(p.tokensOut));
}
