"""Units of the dashboard: token file, sessions, rate limit, JSON views, SVG charts."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime

import pytest

from bot.index import ConversationRecord
from channels.web.analytics import Analytics, Bar, bar_chart, column_chart
from channels.web.auth import (
    RateLimiter,
    SessionStore,
    load_or_create_token,
    login_client,
    token_matches,
)
from channels.web.views import LABEL_SHOWN, conversation_meta, event_view, line_views, page_of
from tests.channels.web.conftest import Stack

SVG = "{http://www.w3.org/2000/svg}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_created_private_then_reused(tmp_path) -> None:
    path = tmp_path / "sub" / "web_token"
    token = load_or_create_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(path) == token
    assert token_matches(token, f" {token}\n") and not token_matches(token, token[:-1])
    path.write_text("")  # an emptied file gets a fresh token rather than an empty one
    assert load_or_create_token(path) not in ("", token)


def test_sessions_expire_and_revoke() -> None:
    clock = Clock()
    sessions = SessionStore(ttl_seconds=60, clock=clock)
    sid = sessions.create()
    assert sessions.valid(sid) and not sessions.valid("forged") and not sessions.valid(None)
    clock.now += 59
    assert sessions.valid(sid)
    clock.now += 2
    assert not sessions.valid(sid)
    other = sessions.create()
    sessions.revoke(other)
    assert not sessions.valid(other) and len(sessions) == 0


def test_a_session_outlives_no_ttl_when_the_clock_is_set_back() -> None:
    """The clock set back a day after a login: the session ends a ttl later, not a day
    and a ttl later."""
    clock = Clock()
    sessions = SessionStore(ttl_seconds=60, clock=clock)
    sid = sessions.create()
    clock.now -= 86400
    assert sessions.valid(sid)
    clock.now += 61
    assert not sessions.valid(sid)


def test_sessions_survive_a_restart_as_hashes(tmp_path) -> None:
    clock = Clock()
    path = tmp_path / "web_sessions.json"
    first = SessionStore(ttl_seconds=60, clock=clock, path=path)
    sid = first.create()
    gone = first.create()
    first.revoke(gone)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sid not in path.read_text()  # only hashes are stored
    second = SessionStore(ttl_seconds=60, clock=clock, path=path)
    assert second.valid(sid) and not second.valid(gone)
    clock.now += 61
    assert not SessionStore(ttl_seconds=60, clock=clock, path=path).valid(sid)
    path.write_text("{not json")
    assert len(SessionStore(ttl_seconds=60, clock=clock, path=path)) == 0


def test_rate_limiter_sliding_window_per_client() -> None:
    clock = Clock()
    limiter = RateLimiter(attempts=3, window_seconds=60, clock=clock)
    assert [limiter.check("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.check("a")
    assert 59 < wait <= 60
    assert limiter.check("b") == 0.0  # per client
    clock.now += 30
    assert limiter.check("a") > 0  # refused attempts do not extend the window
    clock.now += 31
    assert limiter.check("a") == 0.0
    limiter.reset("a")
    assert all(limiter.check("a") == 0.0 for _ in range(2))


def test_rate_limiter_forgets_clients_that_stopped_trying() -> None:
    # Regression: past 10,000 clients only empty entries were dropped, and none ever is,
    # so a flood of distinct addresses (one IPv6 /64 is plenty) grew the table forever,
    # scanning all of it on every attempt.
    clock = Clock()
    limiter = RateLimiter(attempts=3, window_seconds=60, clock=clock)
    for i in range(10_001):
        limiter.check(f"2001:db8::{i:x}")
    clock.now += 61
    limiter.check("2001:db8::ffff:1")
    assert len(limiter) == 1
    assert limiter.check("2001:db8::ffff:1") == 0.0  # the live client is still counted
    assert [limiter.check("2001:db8::ffff:1") for _ in range(2)][-1] > 0


def test_the_clients_a_local_proxy_names_share_its_ceiling() -> None:
    clock = Clock()
    limiter = RateLimiter(attempts=3, window_seconds=60, clock=clock, peer_factor=2)
    assert [limiter.check(f"127.0.0.1 for 10.0.0.{i}", "127.0.0.1") for i in range(6)] == [0.0] * 6
    assert limiter.check("127.0.0.1 for 10.0.0.99", "127.0.0.1") > 0  # the peer's 6 are used
    assert limiter.check("192.0.2.5") == 0.0  # a peer of its own is not concerned
    clock.now += 61
    assert limiter.check("127.0.0.1 for 10.0.0.99", "127.0.0.1") == 0.0


def test_the_rate_limiter_keeps_at_most_max_clients() -> None:
    # Regression: past 10,000 clients every attempt scanned them all (6 ms a try on the
    # event loop under a flood of forged addresses); the oldest are now dropped in order.
    clock = Clock()
    limiter = RateLimiter(attempts=3, window_seconds=60, clock=clock, max_clients=100)
    for i in range(1_000):
        limiter.check(f"198.18.0.{i}")
        clock.now += 0.01
    assert len(limiter) == 100
    limiter.check("198.18.0.999")
    assert limiter.check("198.18.0.999") == 0.0  # the newest are still counted
    assert limiter.check("198.18.0.999") > 0


def test_a_refused_client_is_told_once_a_window() -> None:
    clock = Clock()
    limiter = RateLimiter(attempts=1, window_seconds=60, clock=clock)
    assert limiter.first_refusal("a") and not limiter.first_refusal("a")
    assert limiter.first_refusal("b")
    clock.now += 61
    assert limiter.first_refusal("a")


def test_conversation_meta_read_only_and_label() -> None:
    rec = ConversationRecord(
        id="conv-1",
        channel="email",
        created="2026-01-01T00:00:00.000Z",
        updated="2026-01-02T00:00:00.000Z",
        pinned=True,
        identity_key="email-thread:x",
        channel_meta={
            "chatId": "sarah@example.com",
            "contact": "Sarah",
            "subject": "Pricing follow-up",
        },
    )
    meta = conversation_meta(rec)
    assert meta["readOnly"] is True and meta["label"] == "Sarah — Pricing follow-up"
    assert "chatId" not in meta["channelMeta"] and "identityKey" not in meta
    rec.pinned = False  # after /new on the channel: continuable from the web
    assert conversation_meta(rec)["readOnly"] is False
    web = ConversationRecord(id="conv-2", channel="web", created="x", updated="x", pinned=True)
    assert conversation_meta(web)["readOnly"] is False and conversation_meta(web)["label"] == ""
    # An escalation made the owner's Telegram conversation with only the owner's id as
    # its participant: a bare id is no label (it showed as "1001 · New conversation").
    tg = ConversationRecord(
        id="conv-3", channel="telegram", created="x", updated="x", participants=["1001"]
    )
    assert conversation_meta(tg)["label"] == ""
    tg.participants = ["Hanan"]
    assert conversation_meta(tg)["label"] == "Hanan"


def test_a_long_stored_subject_is_shown_cut_and_kept_whole_for_the_title() -> None:
    # Regression (session 42): an incoming mail's subject is stored as it came, and the
    # dashboard showed one of kilobytes whole beside the conversation's title.
    subject = "Re: " + "quarterly budget review and the travel plans " * 100
    rec = ConversationRecord(
        id="conv-1",
        channel="email",
        created="x",
        updated="x",
        channel_meta={"contact": "Sarah", "subject": subject},
    )
    meta = conversation_meta(rec)
    assert len(meta["label"]) <= LABEL_SHOWN and meta["label"].endswith("…")
    assert meta["label"].startswith("Sarah — Re: quarterly budget review")
    assert meta["labelFull"] == f"Sarah — {subject}"
    short = ConversationRecord(
        id="conv-2", channel="email", created="x", updated="x", channel_meta={"subject": "Hi"}
    )
    assert conversation_meta(short)["label"] == "Hi" and "labelFull" not in conversation_meta(short)
    family = "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
    emoji = ConversationRecord(
        id="conv-3",
        channel="email",
        created="x",
        updated="x",
        channel_meta={"subject": family * 100},
    )
    cut = conversation_meta(emoji)["label"]
    assert cut.endswith("…") and cut[:-1] == family * (len(cut[:-1]) // len(family))  # whole


def test_line_views_keep_notes_and_drop_internals() -> None:
    lines = [
        {"type": "meta", "id": "conv-1"},
        {
            "type": "turn",
            "role": "user",
            "content": "hi",
            "turnNumber": 1,
            "timestamp": "t",
            "metadata": {"messageId": "secret-ref"},
        },
        {"type": "event", "event": "message_ref", "ref": "x"},
        {"type": "event", "event": "compression", "summary": "we talked", "compressedThrough": 1},
        {"type": "turn", "role": "assistant", "content": "hello", "turnNumber": 1},
    ]
    views = line_views(lines)
    assert [v["type"] for v in views] == ["turn", "event", "turn"]
    assert "metadata" not in views[0]
    assert views[1] == {
        "type": "event",
        "event": "compression",
        "text": "we talked",
        "timestamp": None,
        "compressedThrough": 1,
    }
    assert event_view({"type": "event", "event": "command"}) is None


def _turns(n: int) -> list[dict]:
    out = []
    for i in range(1, n + 1):
        out.append({"type": "turn", "role": "user", "turnNumber": i})
        out.append({"type": "turn", "role": "assistant", "turnNumber": i})
    return out


def test_page_of_tail_before_and_around() -> None:
    items = _turns(40)  # 80 items
    tail, more = page_of(items, limit=10)
    assert [t["turnNumber"] for t in tail] == [36, 36, 37, 37, 38, 38, 39, 39, 40, 40] and more
    older, more = page_of(items, limit=10, before=36)
    assert older[-1]["turnNumber"] == 35 and older[0]["turnNumber"] == 31 and more
    first, more = page_of(items, limit=10, before=3)
    assert [t["turnNumber"] for t in first] == [1, 1, 2, 2] and not more
    around, _ = page_of(items, limit=10, around=20)
    assert 20 in [t["turnNumber"] for t in around]
    short, more = page_of(_turns(2), limit=10)
    assert len(short) == 4 and not more


def test_bar_chart_escapes_and_scales() -> None:
    svg = bar_chart("T <x>", [Bar("<script>alert(1)</script>", 10, "10 turns"), Bar("b & c", 5)])
    root = ET.fromstring(svg)  # well-formed despite hostile labels
    assert not list(root.iter(f"{SVG}script"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("data-value")]
    widths = {r.get("data-value"): float(r.get("width")) for r in rects}
    assert widths["10"] == pytest.approx(2 * widths["5"])
    assert "No data yet" in bar_chart("Empty", [])


def test_a_label_with_control_characters_keeps_the_chart_well_formed() -> None:
    # Regression: escaping left characters XML forbids (a title or a group name with
    # \x01, \x1b or a lone surrogate): the SVG did not parse and the chart showed broken.
    svg = bar_chart("T\x1b[31m", [Bar("a\x01b\x0bc\ud800d\ufffe", 3, "3 \x00turns")])
    root = ET.fromstring(svg)
    texts = "".join(root.itertext())
    assert "abcd" in texts.replace("\ufffd", "")


def test_column_chart_stacks_per_channel() -> None:
    days = [date(2026, 1, d) for d in (1, 2, 3)]
    svg = column_chart("Activity", days, {"web": [1, 0, 3], "telegram": [2, 0, 0]})
    root = ET.fromstring(svg)
    cols = [
        (r.get("data-channel"), r.get("data-day"), r.get("data-value"))
        for r in root.iter(f"{SVG}rect")
        if r.get("data-channel")
    ]
    assert sorted(cols) == sorted(
        [("web", "2026-01-01", "1"), ("telegram", "2026-01-01", "2"), ("web", "2026-01-03", "3")]
    )
    assert "No activity" in column_chart("Empty", days, {})


pytestmark_stack = pytest.mark.asyncio(loop_scope="module")


@pytestmark_stack
async def test_analytics_endpoints_over_real_index(stack: Stack, client) -> None:
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "let us plan <b>the</b> budget")
    await manager.set_title_topics(conv.id, "Budget <script>", ["finance", "Planning"], 1)
    await stack.deliver_telegram("hello from the phone")
    async with client.get(f"{stack.url}/analytics/conversations.svg") as r:
        assert r.content_type == "image/svg+xml"
        svg = await r.text()
    root = ET.fromstring(svg)
    labels = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert any("Budget <script>" in label for label in labels)
    assert any("Hanan (telegram)" in label for label in labels)
    async with client.get(f"{stack.url}/analytics/topics.svg") as r:
        topics = ET.fromstring(await r.text())
    values = {t.text for t in topics.iter(f"{SVG}title")}
    assert {"finance", "planning"} <= values
    async with client.get(f"{stack.url}/analytics/channels.svg") as r:
        chan = ET.fromstring(await r.text())
    by_channel: dict[str, int] = {}
    for rect in chan.iter(f"{SVG}rect"):
        if rect.get("data-channel"):
            by_channel[rect.get("data-channel")] = by_channel.get(
                rect.get("data-channel"), 0
            ) + int(rect.get("data-value"))
    assert by_channel["web"] == 1 and by_channel["telegram"] >= 1
    async with client.get(f"{stack.url}/analytics/nope.svg") as r:
        assert r.status == 404
    async with client.get(f"{stack.url}/api/analytics") as r:
        totals = await r.json()
    assert totals["conversations"] == 2 and {c["channel"] for c in totals["channels"]} == {
        "web",
        "telegram",
    }


@pytestmark_stack
async def test_activity_per_day_counts_days_of_the_owners_calendar(stack: Stack) -> None:
    # Regression: messages were counted per UTC day: a message sent at 00:30 in Berlin
    # appeared on the day before in the owner's chart.
    manager = stack.services.conversations
    conv = await manager.create("web")
    await manager.append_turn(conv.id, "user", "late", timestamp="2026-03-09T23:30:00.000Z")
    await manager.append_turn(conv.id, "user", "early", timestamp="2026-03-10T06:00:00.000Z")
    owner = stack.config.owner
    zone, owner.timezone = owner.timezone, "Europe/Berlin"
    try:
        noon = datetime(2026, 3, 12, 12, tzinfo=UTC)
        svg = await Analytics(stack.channel, now=lambda: noon).channels_chart(days=7)
    finally:
        owner.timezone = zone
    root = ET.fromstring(svg)
    counts = {
        r.get("data-day"): int(r.get("data-value"))
        for r in root.iter(f"{SVG}rect")
        if r.get("data-channel") == "web"
    }
    assert counts == {"2026-03-10": 2}


def test_the_login_client_is_the_proxys_client_only_behind_a_local_peer() -> None:
    xff = {"X-Forwarded-For": "10.0.0.1, 203.0.113.9"}
    assert login_client("127.0.0.1", xff) == "127.0.0.1 for 203.0.113.9"
    assert login_client("::1", {"Forwarded": 'for="[2001:db8::1]"'}) == "::1 for [2001:db8::1]"
    assert login_client("127.0.0.1", {}) == "127.0.0.1"
    # a peer on the network cannot choose its key through the header
    assert login_client("192.0.2.5", xff) == "192.0.2.5"
    assert login_client(None, {}) == "unknown"
    # an IPv6 host is given a /64: counted as one client, not one per address
    assert login_client("2001:db8::5", {}) == login_client("2001:db8::ffff:1", {})
    assert login_client("2001:db8::5", {}) == "2001:db8::/64"
    assert login_client("::ffff:192.0.2.5", {}) == "::ffff:192.0.2.5"
