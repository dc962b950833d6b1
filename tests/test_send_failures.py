"""A message the outbox gives up on is told to the owner (bot.send_failures)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.channel import Misconfigured
from bot.daemon import wire_channels
from bot.events import OutboundMessage
from bot.index import ConversationRecord
from bot.outbox import TELL_AFTER
from bot.send_failures import SendFailureAlerts, alert_text
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound


class Stack:
    def __init__(self, services: Any) -> None:
        self.s = services
        self.telegram = RecordingChannel("telegram")
        self.email = RecordingChannel("email")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    config = telegram_config(tmp_path)
    services = await open_services(config, brain=ScriptedBrain())
    stack = Stack(services)
    wire_channels(services, [stack.telegram, stack.email])  # the daemon's wiring
    for channel in (stack.telegram, stack.email):
        await attach_channel(services, channel)
    try:
        yield stack
    finally:
        await shutdown_services(services)


def _mail(text: str, number: int) -> Any:
    return inbound(
        text,
        channel="email",
        sender="robin.owner@example.org",
        identity_verified=True,
        subject=f"Question {number}",
        message_id=f"<q{number}@example.org>",
    )


async def test_an_undeliverable_reply_is_told_to_the_owner(stack: Stack) -> None:
    # Regression: a reply the channel refused for good was logged and counted in
    # `my-agent status`, and the owner never learnt that it had not arrived.
    stack.email.permanent = True
    await stack.s.router.deliver(_mail("Where is the spare key?", 1))
    await settle(stack.s)
    assert stack.email.sent == []
    (alert,) = [m for m in stack.telegram.sent if m.kind == "notice"]
    assert alert.text.startswith("Could not deliver a reply on email to robin.owner@example.org")
    assert '"re: Where is the spare key?"' in alert.text
    assert "the conversation keeps it" in alert.text
    # a channel that stays down fails each message: the owner is not flooded
    await stack.s.router.deliver(_mail("And the garage code?", 2))
    await settle(stack.s)
    assert len([m for m in stack.telegram.sent if m.kind == "notice"]) == 1


async def test_alerts_about_one_channel_are_spaced_and_count_the_rest() -> None:
    alerted: list[str] = []

    class Owner:
        async def alert_owner(self, text: str) -> None:
            alerted.append(text)

    now = [0.0]
    alerts = SendFailureAlerts(Owner(), interval=600, clock=lambda: now[0])  # type: ignore[arg-type]
    message = OutboundMessage(channel="telegram", chat_id="42", text="hello " * 40)
    for _ in range(3):
        await alerts.on_failed(message, "chat not found")
    await alerts.on_failed(OutboundMessage(channel="email", chat_id="a@b", text="x"), "550")
    assert len(alerted) == 2  # one per channel
    now[0] = 601.0
    await alerts.on_failed(message, "chat not found")
    assert len(alerted) == 3
    assert alerted[2].endswith("2 more messages on telegram failed since the last alert.")
    assert "…" in alerted[0] and len(alerted[0]) < 300  # the text is cut


def test_alert_text_names_what_failed() -> None:
    message = OutboundMessage(channel="telegram", chat_id="42", text="Hi", kind="escalation")
    text = alert_text(message, "blocked by the user")
    assert text == (
        'Could not deliver an alert about a stranger on telegram to 42: "Hi" '
        "(blocked by the user). It will not be retried."
    )


def test_a_right_to_left_preview_is_isolated() -> None:
    # Regression: an undelivered Arabic message swallowed the quote and the error after
    # it into its right-to-left run.
    alert = alert_text(OutboundMessage(channel="telegram", chat_id="1", text="مرحبا"), "refused")
    assert '"\u2068مرحبا\u2069" (refused)' in alert


async def test_a_misconfigured_channel_is_told_after_a_few_attempts_while_retried(
    stack: Stack,
) -> None:
    # Regression: a TLS misconfiguration (ssl to a plain server, STARTTLS not offered)
    # failed like an outage: 50 attempts, hours, before the owner heard of it.
    stack.s.outbox.base_delay = 0.001
    attempts = 0
    send = stack.email.send

    async def misconfigured(message: OutboundMessage) -> Any:
        nonlocal attempts
        attempts += 1
        if attempts <= TELL_AFTER + 2:
            raise Misconfigured("the server does not offer STARTTLS (security: starttls)")
        return await send(message)

    stack.email.send = misconfigured  # type: ignore[method-assign]
    await stack.s.router.deliver(_mail("Where is the spare key?", 1))
    for _ in range(500):
        if stack.email.sent:
            break
        await asyncio.sleep(0.01)
    # still retried, and sent once it works; the owner was told once, on the way
    assert [m.text for m in stack.email.sent] == ["re: Where is the spare key?"]
    (alert,) = [m for m in stack.telegram.sent if m.kind == "notice"]
    assert alert.text.startswith("Cannot send a reply on email to robin.owner@example.org")
    assert "STARTTLS" in alert.text and "will not fix itself" in alert.text


async def test_an_ordinary_failure_is_not_told_while_retried(stack: Stack) -> None:
    stack.s.outbox.base_delay = 0.001
    stack.email.fail_next(TELL_AFTER + 2)  # an outage: it may well pass
    await stack.s.router.deliver(_mail("Where is the spare key?", 1))
    await settle(stack.s)
    assert len(stack.email.sent) == 1
    assert [m for m in stack.telegram.sent if m.kind == "notice"] == []


class _Owner:
    """What SendFailureAlerts uses of the services: the owner's alerts and a record."""

    def __init__(self, record: ConversationRecord | None = None) -> None:
        self.alerted: list[str] = []
        self.record = record
        self.conversations = self

    async def alert_owner(self, text: str) -> None:
        self.alerted.append(text)

    async def get(self, conversation_id: str) -> ConversationRecord | None:
        return self.record if self.record and self.record.id == conversation_id else None


def _record(**meta: Any) -> ConversationRecord:
    return ConversationRecord(
        id="c1", channel="telegram", created="", updated="", channel_meta=meta
    )


async def test_an_alert_names_the_person_a_bare_telegram_id_stands_for() -> None:
    # Regression: "Could not deliver a reply on telegram to 2002" said nothing about who.
    owner = _Owner(_record(contact="Bob\u200b Jones\n(the owner)"))
    alerts = SendFailureAlerts(owner)  # type: ignore[arg-type]
    reply = OutboundMessage(channel="telegram", chat_id="2002", text="Hi", conversation_id="c1")
    await alerts.on_failed(reply, "Forbidden: bot was blocked by the user")
    await alerts.on_stuck(reply, "Unauthorized")
    named = "Bob Jones (the owner) (2002)"  # visible, on one line
    assert owner.alerted[0].startswith(f"Could not deliver a reply on telegram to {named}: ")
    assert owner.alerted[1].startswith(f"Cannot send a reply on telegram to {named}: ")
    # nothing known: the id as before
    alerts = SendFailureAlerts(_Owner())  # type: ignore[arg-type]
    orphan = OutboundMessage(channel="telegram", chat_id="7", text="x", conversation_id="c9")
    await alerts.on_failed(orphan, "chat not found")
    assert alerts.services.alerted[0].startswith(  # type: ignore[attr-defined]
        "Could not deliver a reply on telegram to 7: "
    )


async def test_an_undelivered_acknowledgement_is_not_told() -> None:
    # Regression: the neutral "passed on to the owner" to a stranger who blocked the bot
    # alerted the owner, who already had the stranger's message and nothing to do.
    owner = _Owner()
    alerts = SendFailureAlerts(owner)  # type: ignore[arg-type]
    ack = OutboundMessage(
        channel="telegram", chat_id="9", text="Passed on.", kind="acknowledgement"
    )
    await alerts.on_failed(ack, "Forbidden: bot was blocked by the user")
    assert owner.alerted == []
    await alerts.on_failed(OutboundMessage(channel="telegram", chat_id="9", text="x"), "403")
    assert len(owner.alerted) == 1  # and it held no place in the channel's spacing
