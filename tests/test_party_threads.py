"""Every answer to a third party's mail carries the threading of the mail it answers
(bot/party_lines.py's ``thread_fields`` and ``answered_message``, through the owner's
``reply_target``): the model's answer, an acknowledgement, a command's answer, the
owner's ``/reply``, made live or after a restart (owed, cut, or queued again from the
party's file). Before session 30 these paths passed the Message-ID, subject and
Reply-To alone: after a restart (the channel's memory of the mail gone) an answer had no
References chain and no Thread-Index; before session 31 it had no To/Cc either, and a
reply-all went to the sender alone. End to end through pymap and aiosmtpd:
tests/channels/email/test_e2e_party_threads.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.config import AppConfig
from bot.events import OutboundMessage
from bot.parties import PartyRecord, party_handle
from bot.party_lines import answered_message, thread_fields
from bot.party_resume import escalate_cut_messages, resume_known_parties
from bot.services import open_services
from bot.turn_recorder import reply_target
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    owner_identities,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

KIM = "kim@example.net"  # a known contact
EVE = "eve@example.org"  # a stranger
OWNER_TG = owner_identities()["telegram"][0]
US, CAROL, DAN = "bot@example.com", "carol@example.net", "dan@example.net"  # To/Cc
INDEX = "thread-index:{}:AdtnTEZxAAECAwQFBgcICQoLDA0ODw=="  # the channel's reference


def _config(tmp_path: Path) -> AppConfig:
    return telegram_config(
        tmp_path,
        trust={"contacts": {"email": {KIM: "known"}}, "acknowledgement": "Noted, thanks."},
    )


def _mail(sender: str, n: int, text: str) -> Any:
    """A mail as the e-mail channel hands it over: a reply in a thread, with Reply-To
    and its Outlook thread."""
    return inbound(
        text,
        channel="email",
        sender=sender,
        message_id=f"dedup-{n}",
        message_ref=f"<m{n}@example.net>",
        thread_refs=("<middle@example.net>", "<start@example.net>"),
        subject="RE: Dinner",
        metadata={
            "reply_to": [f"home-{sender}"],
            "thread_index": INDEX.format(sender),
            "to": [US, CAROL],
            "cc": [DAN],
            "readers": [CAROL, DAN],  # reply_all: the channel's word
        },
    )


def _threading(out: OutboundMessage) -> tuple[Any, ...]:
    return (
        out.in_reply_to,
        out.thread_refs,
        out.subject,
        out.metadata.get("reply_to"),
        out.metadata.get("thread_index"),
        (out.metadata.get("to"), out.metadata.get("cc"), out.metadata.get("readers")),
    )


def _expected(sender: str, n: int) -> tuple[Any, ...]:
    return (
        f"<m{n}@example.net>",
        ("<start@example.net>", "<middle@example.net>", f"<m{n}@example.net>"),
        "RE: Dinner",
        [f"home-{sender}"],
        INDEX.format(sender),
        ([US, CAROL], [DAN], [CAROL, DAN]),
    )


class Core:
    """One life of the core, with recording e-mail and Telegram channels."""

    def __init__(self, services: Any, email: RecordingChannel, brain: ScriptedBrain) -> None:
        self.s, self.email, self.brain = services, email, brain

    @classmethod
    async def start(cls, config: AppConfig, resume: bool = False) -> Core:
        brain = ScriptedBrain()
        services = await open_services(config, brain=brain)
        email = RecordingChannel("email")
        services.channels["email"] = email
        if resume:  # as bot/daemon.py does, before the channels
            await resume_known_parties(services)
            await escalate_cut_messages(services)
        await attach_channel(services, email)
        await attach_channel(services, RecordingChannel("telegram"))
        await settle(services)
        return cls(services, email, brain)

    async def stop(self) -> None:
        await self.s.replies.queue.drain(timeout=0.05)
        await shutdown_services(self.s)

    def sent(self, kind: str) -> list[OutboundMessage]:
        return [m for m in self.email.sent if m.kind == kind]


async def test_every_answer_to_a_mail_carries_its_threading_live(tmp_path: Path) -> None:
    core = await Core.start(_config(tmp_path))
    await core.s.router.deliver(_mail(KIM, 1, "Dinner on Friday?"))
    await core.s.router.deliver(_mail(KIM, 2, "/help"))
    await core.s.router.deliver(_mail(EVE, 3, "Is this the right address?"))
    await settle(core.s)
    [answer] = core.sent("reply")
    [command] = core.sent("command")
    [ack] = core.sent("acknowledgement")
    assert _threading(answer) == _expected(KIM, 1)
    assert _threading(command) == _expected(KIM, 2)
    assert _threading(ack) == _expected(EVE, 3)
    # The owner's /reply goes under the party's last mail, threaded alike.
    eve = party_handle("email", EVE)
    await core.s.router.deliver(inbound(f"/reply {eve} Yes, it is.", sender=OWNER_TG))
    await settle(core.s)
    [_, relayed] = core.sent("reply")
    assert relayed.text == "Yes, it is." and _threading(relayed) == _expected(EVE, 3)
    await core.stop()


async def test_answers_made_after_a_restart_carry_the_threading(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await Core.start(config)
    first.s.replies.queue.accepting = False  # stopping: the contact's answer is not made
    await first.s.router.deliver(_mail(KIM, 1, "Dinner on Friday?"))
    await first.stop()
    assert first.email.sent == []
    # A stranger's mail recorded, then a stop before its escalation and acknowledgement.
    cut = await Core.start(config)
    cut.s.router.strangers._acknowledge_and_escalate = _crash  # type: ignore[method-assign]
    await cut.s.router.deliver(_mail(EVE, 2, "Is this the right address?"))
    await cut.stop()

    second = await Core.start(config, resume=True)
    [answer] = second.sent("reply")
    [ack] = second.sent("acknowledgement")
    assert _threading(answer) == _expected(KIM, 1)
    assert _threading(ack) == _expected(EVE, 2)
    await second.stop()


async def test_an_answer_queued_again_from_the_file_carries_the_threading(
    tmp_path: Path,
) -> None:
    # The answer is written to the party's file, then queued: a crash between the two
    # leaves it to be queued from the file at the next start.
    config = _config(tmp_path)
    first = await Core.start(config)
    await first.s.router.deliver(_mail(KIM, 1, "Dinner on Friday?"))
    await settle(first.s)
    first.email.failing = True
    sent = first.email.attempts
    await first.s.router.deliver(_mail(KIM, 2, "Or Saturday?"))
    while first.email.attempts == sent:
        await asyncio.sleep(0.01)
    await first.s.state.execute("DELETE FROM outbox WHERE dedup_key = 'email:dedup-2:reply'")
    await first.stop()

    second = await Core.start(config, resume=True)
    assert second.brain.requests == []  # not made again: queued from the file
    [answer] = second.sent("reply")
    assert _threading(answer) == _expected(KIM, 2)
    await second.stop()


async def _crash(*_: Any, **__: Any) -> None:
    """The process died right after the message was recorded."""


def test_a_line_written_before_the_recipients_were_kept_still_answers_the_sender() -> None:
    # A party's file from before session 31: no to/cc/readers on its lines. Its message
    # comes back without them, and its answer goes to the sender as the live rule does
    # for a mail that names nobody else.
    at = "2026-01-01T00:00:00Z"
    party = PartyRecord(party_handle("email", KIM), "email", KIM, None, KIM, "known", "config",
                        at, at)  # fmt: skip
    line = {"type": "message", "direction": "in", "content": "Dinner?", "messageRef": "d-1",
            "replyRef": "<m1@example.net>", "subject": "Dinner"}  # fmt: skip
    msg = answered_message(party, line)
    assert msg.metadata == {}
    assert reply_target(msg).metadata == {}
    # and one written now keeps them, under the names the live message had
    kept = thread_fields(_mail(KIM, 1, "Dinner?"))
    assert (kept["to"], kept["cc"], kept["readers"]) == ([US, CAROL], [DAN], [CAROL, DAN])
    again = answered_message(party, {**line, **kept})
    assert reply_target(again).metadata == reply_target(_mail(KIM, 1, "x")).metadata
