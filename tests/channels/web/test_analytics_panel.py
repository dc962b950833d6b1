"""The Analytics panel: what it counts (against ``my-agent status`` and ``/status``, and
the model's answers to known contacts beside the conversations) and how its charts name
conversations and topics."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import aiohttp

from bot import healthcheck
from bot.command_status import conversation_lines, party_costs_line
from channels.web.analytics import Analytics, Bar, bar_chart
from tests.channels.web.conftest import login, start_stack, stop_stack
from tests.conftest import settle
from tests.support import ScriptedBrain

SVG = "{http://www.w3.org/2000/svg}"


async def test_status_and_analytics_count_the_same_turns(tmp_path: Path) -> None:
    # Regression (session 40): `my-agent status` said "6 turns" of the stored messages,
    # where /status and the dashboard's Analytics said 3 (a question and its reply
    # share a turn number).
    stack = await start_stack(tmp_path / "data")
    try:
        manager = stack.services.conversations
        conv = await manager.create("web")
        for i in range(3):
            await manager.append_turn(conv.id, "user", f"question {i}")
            await manager.append_turn(conv.id, "assistant", f"answer {i}")
        totals = await Analytics(stack.channel).totals()
        rec = await manager.get(conv.id)
        assert rec is not None
        slash = conversation_lines(stack.services, rec, "t")[1]
        report = await asyncio.to_thread(healthcheck.collect, stack.config, deep=False)
    finally:
        await stop_stack(stack)
    assert totals["turns"] == 3 and "3 turns" in slash
    counts = report["counts"]
    assert counts["turn_numbers"] == totals["turns"]
    assert counts["turns"] == 6  # the key keeps its meaning: stored messages
    text = healthcheck.format_text(report)
    assert "(web 1), 6 messages in 3 turns\n" in text, text


def labels_of(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]


async def test_chart_labels_show_bidi_and_invisible_characters(tmp_path: Path) -> None:
    # Regression (session 40): an unnamed group's chart label was its `contact` (the
    # group's name, which any member sets) with its right-to-left override and zero-width
    # space live: "invoice_\u202egnp.exe" read "invoice_exe.png". The dashboard shows
    # them written out elsewhere.
    stack = await start_stack(tmp_path / "data")
    try:
        manager = stack.services.conversations
        conv = await manager.create(
            "telegram",
            identity_key="telegram:group:-100",
            pinned=True,
            participants=[],
            channel_meta={
                "chatId": "-100",
                "groupId": "-100",
                "contact": "Fam\u200bily invoice_\u202egnp.exe",
            },
        )
        await manager.append_turn(conv.id, "user", "hello")
        other = await manager.create("web")
        await manager.append_turn(other.id, "user", "hello")
        await manager.set_title_topics(other.id, "Plans", ["tri\u202ep", "wo\u200brk"], 1)
        analytics = Analytics(stack.channel)
        conversations = await analytics.conversations_chart()
        topics = await analytics.topics_chart()
    finally:
        await stop_stack(stack)
    for svg in (conversations, topics):
        assert not any(c in svg for c in "\u202e\u200b"), svg
    shown = labels_of(conversations)
    assert any(
        label.startswith("Fam[U+200B]ily invoice_[U+202E]gnp.exe (telegram)") for label in shown
    ), shown
    assert any(label.startswith("tri[U+202E]p") for label in labels_of(topics))
    assert any(label.startswith("wo[U+200B]rk") for label in labels_of(topics))


async def test_chart_labels_name_conversations_as_the_sidebar_does(tmp_path: Path) -> None:
    # Regression (session 40): the chart read the contact or subject alone, so a group
    # (groupTitle) and an older escalation conversation were labelled unlike the sidebar.
    stack = await start_stack(tmp_path / "data")
    try:
        services = stack.services
        manager = services.conversations
        group = await manager.create(
            "telegram",
            identity_key="telegram:group:-200",
            pinned=True,
            participants=["Ann"],
            channel_meta={"chatId": "-200", "groupTitle": "Chess Club", "contact": "Ann"},
        )
        await manager.append_turn(group.id, "user", "e4")
        await manager.set_title_topics(group.id, "Openings", [], 1)
        party, _ = await services.external.record_inbound(
            "telegram", "8081", display_name=None, chat_id="8081", text="hi", message_ref="o-1"
        )
        old = await manager.create(
            "telegram",
            identity_key="telegram:1001",
            pinned=True,
            participants=["1001"],
            channel_meta={"chatId": "1001"},
            reason="escalation",
        )
        await manager.append_event(old.id, "escalation", partyId=party.id, text="hi")
        await manager.set_title_topics(old.id, "Escalation: 8081 (telegram)", [], 0)
        await services.external.record_inbound(
            "telegram", "8081", display_name="Eve", chat_id="8081", text="?", message_ref="o-2"
        )
        svg = await Analytics(stack.channel).conversations_chart()
    finally:
        await stop_stack(stack)
    tooltips = [t.text for t in ET.fromstring(svg).iter(f"{SVG}title")]
    assert "Chess Club · Openings" in tooltips, tooltips
    assert "Escalation: Eve (telegram)" in tooltips, tooltips


def test_a_cut_label_keeps_its_isolate_closed_and_no_half_code() -> None:
    svg = bar_chart(
        "T",
        [
            Bar("Ann · \u2068" + "\u05e9" * 40 + "\u2069", 2),
            Bar("abcdefghijklmnopqrstuvwxy\u200b", 1),
        ],
    )
    # each label's text follows its tooltip
    shown = [t.tail or "" for t in ET.fromstring(svg).iter(f"{SVG}title")]
    assert shown[0].endswith("…\u2069"), ascii(shown[0])
    assert shown[1] == "abcdefghijklmnopqrstuvwxy…", shown


async def test_a_sub_cent_cost_and_large_token_counts_read_as_they_are(tmp_path: Path) -> None:
    # Regression (session 40): a conversation that cost a few millionths of a dollar
    # read "$0.0000" in the chart and /status, and its 1234567 tokens had no separators.
    stack = await start_stack(tmp_path / "data")
    try:
        manager = stack.services.conversations
        conv = await manager.create("web")
        await manager.append_turn(conv.id, "user", "hello")
        await manager.append_turn(
            conv.id, "assistant", "hi", usage={"input": 1_234_567, "output": 10}, cost=0.000004
        )
        svg = await Analytics(stack.channel).conversations_chart()
        rec = await manager.get(conv.id)
        assert rec is not None
        cost_line = conversation_lines(stack.services, rec, "t")[3]
    finally:
        await stop_stack(stack)
    assert "1 turn · < $0.0001" in labels_of(svg)
    assert cost_line == "Cost: < $0.0001 (1,234,567 in / 10 out tokens)"


async def test_known_contacts_answers_cost_the_same_in_analytics_status_and_external(
    tmp_path: Path,
) -> None:
    # Regression (session 40): the model's answers to a known contact were paid calls
    # counted nowhere: not in /api/analytics, /status nor the contact's card.
    stack = await start_stack(tmp_path / "data", brain=ScriptedBrain())
    try:
        services = stack.services
        await stack.deliver_telegram("hello?", sender_id="8082", name="Kim")
        party = await services.external.find("8082")
        assert party is not None
        await services.external.set_tier(party.id, "known")
        await stack.deliver_telegram("how are you", sender_id="8082", name="Kim")
        await settle(services)
        line = await party_costs_line(services)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            await login(session, stack)
            async with session.get(f"{stack.url}/api/analytics") as r:
                totals = await r.json()
            async with session.get(f"{stack.url}/api/external") as r:
                (card,) = (await r.json())["parties"]
    finally:
        await stop_stack(stack)
    # ScriptedBrain: 100 + len(text) tokens in, 20 out, $0.0015
    assert totals["parties"] == {"cost": 0.0015, "tokensIn": 111, "tokensOut": 20, "parties": 1}
    assert totals["cost"] == 0  # the conversations' own figure is theirs alone
    assert line == "Known contacts' answers: $0.0015 (111 in / 20 out tokens, 1 contact, all time)"
    assert (card["cost"], card["tokensIn"], card["tokensOut"]) == (0.0015, 111, 20)
