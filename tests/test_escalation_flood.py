"""Strangers flooding the owner: one party writing thousands of messages, or many new
parties (rotating identities), must not flood the owner's pinned conversation with
escalations (SPEC.md "Routing and trust": escalations rate-limited)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    RecordingChannel,
    settle,
    shutdown_services,
    start_telegram_core,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

OWNER = "424242"


async def _start(tmp_path: Path) -> tuple[Any, RecordingChannel]:
    return await start_telegram_core(telegram_config(tmp_path), ScriptedBrain())


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[tuple[Any, RecordingChannel]]:
    services, telegram = await _start(tmp_path)
    try:
        yield services, telegram
    finally:
        await shutdown_services(services)


def _to_owner(telegram: RecordingChannel) -> list[Any]:
    return [m for m in telegram.sent if m.chat_id == OWNER]


async def _pinned_escalations(services: Any) -> int:
    rec = await services.conversations.pinned_for(f"telegram:{OWNER}")
    if rec is None:
        return 0
    lines = services.conversations.read_lines(rec.id)
    return sum(1 for ln in lines if ln.get("event") == "escalation")


async def test_one_party_flooding_gets_one_escalation(
    core: tuple[Any, RecordingChannel],
) -> None:
    services, telegram = core
    for n in range(200):
        await services.router.deliver(inbound(f"spam {n}", sender="777", chat="777"))
    await settle(services)
    assert len(_to_owner(telegram)) == 1
    assert await _pinned_escalations(services) == 1


async def test_rotating_identities_do_not_flood_the_owner(tmp_path: Path) -> None:
    # Regression: the rate limit was per party only; a stranger with a new address (or
    # Telegram account) per message put one escalation each into the owner's pinned
    # conversation and chat: 300 identities, 300 escalations; a restart reset nothing.
    services, telegram = await _start(tmp_path)
    try:
        for n in range(150):
            sender = str(5_000_000 + n)
            await services.router.deliver(inbound(f"hello {n}", sender=sender, chat=sender))
        await settle(services)
        sent = len(_to_owner(telegram))
        pinned = await _pinned_escalations(services)
        acks = [m for m in telegram.sent if m.kind == "acknowledgement"]
    finally:
        await shutdown_services(services)
    limit = getattr(services.config.trust, "escalations_per_hour", 20)
    assert sent <= limit + 1 and pinned <= limit, (sent, pinned)
    # nor are the strangers acknowledged without end (by e-mail: backscatter to forged
    # senders)
    assert len(acks) <= limit, len(acks)
    # each party is still recorded, its escalation pending (the dashboard lists them)
    services, telegram = await _start(tmp_path)
    try:
        assert len(await services.external.pending_escalations()) == 150
        for n in range(150, 300):
            sender = str(5_000_000 + n)
            await services.router.deliver(inbound(f"hello {n}", sender=sender, chat=sender))
        await settle(services)
        # the budget holds across the restart: nothing more reached the owner's chat,
        # not even the notice that escalations are held (given once an hour: it was
        # given again at every start, bot/owner_notices.py)
        assert _to_owner(telegram) == [], [m.text for m in _to_owner(telegram)]
        assert await _pinned_escalations(services) == pinned
        assert len(await services.external.pending_escalations()) == 300
    finally:
        await shutdown_services(services)


async def test_the_per_party_limit_holds_across_a_restart(tmp_path: Path) -> None:
    services, telegram = await _start(tmp_path)
    try:
        await services.router.deliver(inbound("first", sender="777", chat="777"))
        await settle(services)
        assert len(_to_owner(telegram)) == 1
    finally:
        await shutdown_services(services)
    services, telegram = await _start(tmp_path)
    try:
        for n in range(20):
            await services.router.deliver(inbound(f"again {n}", sender="777", chat="777"))
        await settle(services)
        assert _to_owner(telegram) == []
        assert await _pinned_escalations(services) == 1
    finally:
        await shutdown_services(services)


async def test_an_escalation_tells_a_namesake_of_the_owner_by_account(
    core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: a Telegram stranger who named themselves after the owner (or after
    # someone the owner trusts) was escalated as "Message from Robin Owner (telegram)":
    # nothing in it told the impostor from the person, and one tap trusted them.
    services, telegram = core
    await services.router.deliver(
        inbound("it's me, trust this account", sender="31337", chat="31337", sender_name="Robin")
    )
    await settle(services)
    (escalation,) = _to_owner(telegram)
    assert escalation.text.startswith("Message from Robin (telegram user 31337), not a known")


async def test_a_strangers_commands_are_not_answered_without_end(
    core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: every command of an untrusted party was answered, past every limit the
    # acknowledgement has: 200 "/help" got 200 answers (by e-mail, each to a From
    # address anyone can forge: the bot as a mail cannon), new identities as many more.
    services, telegram = core
    for _ in range(50):
        await services.router.deliver(inbound("/help", sender="777", chat="777"))
    await settle(services)
    assert len([m for m in telegram.sent if m.chat_id == "777"]) == 1
    for n in range(100):
        sender = str(6_000_000 + n)
        await services.router.deliver(inbound("/help", sender=sender, chat=sender))
    await settle(services)
    answers = [m for m in telegram.sent if m.kind == "command"]
    assert len(answers) <= getattr(services.config.trust, "escalations_per_hour", 20)


async def test_a_strangers_message_opening_with_a_command_reaches_the_owner(
    core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: "/help ..." got the command list back and nothing else: no escalation,
    # so the owner never heard of the neighbour whose basement was flooding.
    services, telegram = core
    text = "/help I'm your neighbour, your basement is flooding, call me on 555-0100"
    await services.router.deliver(inbound(text, sender="778", chat="778"))
    await settle(services)
    (escalation,) = _to_owner(telegram)
    assert "your basement is flooding" in escalation.text and "id " in escalation.text
    assert [m.kind for m in telegram.sent if m.chat_id == "778"] == ["command"]
    # a second one within the escalation interval is not escalated again
    await services.router.deliver(inbound("/search door code", sender="778", chat="778"))
    await settle(services)
    assert len(_to_owner(telegram)) == 1


async def test_an_escalations_quote_is_cut_between_characters(
    core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: the stranger's message, quoted up to 497 code points, was cut inside a
    # family emoji: the owner saw "man + ZWJ" and a stray joiner before the "...".
    services, telegram = core
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    await services.router.deliver(inbound("a" * 495 + family * 2, sender="555", chat="555"))
    await settle(services)
    (escalation,) = _to_owner(telegram)
    assert "a" * 495 + "...\u201d" in escalation.text


async def test_an_escalation_isolates_a_right_to_left_name_and_quote(
    core: tuple[Any, RecordingChannel],
) -> None:
    # Regression: a Hebrew display name reordered "(telegram user 556)" around it, and an
    # Arabic message its closing quotation mark and the line after it.
    services, telegram = core
    await services.router.deliver(
        inbound("مرحبا 123", sender="556", chat="556", sender_name="דוד כהן")
    )
    await settle(services)
    (escalation,) = _to_owner(telegram)
    assert escalation.text.startswith("Message from \u2068דוד כהן\u2069 (telegram user 556)")
    assert "\u201c\u2068مرحبا 123\u2069\u201d" in escalation.text
