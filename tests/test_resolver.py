"""The thread finder's subject fallback (bot/resolver.py): a reply that lost its
In-Reply-To and References joins its conversation by subject, whatever language or
gateway tag its prefix came in; a mail of somebody else's thread never does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.events import OutboundMessage, utcnow
from bot.index import ConversationRecord
from bot.mail_subjects import own_message_id, reply_subject, thread_subject
from bot.resolver import KEPT_SUBJECTS, _age_days, new_subjects, normalise_subject
from bot.services import open_services
from channels.email.outgoing import stable_message_id
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound

OWNER_MAIL = "robin.owner@example.org"
ASSISTANT = "assistant@example.com"
BOB = "bob@plumbing.example"


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Any]:
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={
            "telegram": {"enabled": True, "token": "123456:TEST-token"},
            "email": {"address": ASSISTANT},
        },
    )
    services = await open_services(config, brain=ScriptedBrain())
    try:
        for name in ("telegram", "email", "web"):
            await attach_channel(services, RecordingChannel(name))
        yield services
    finally:
        await shutdown_services(services)


async def _mail(services: Any, n: int, subject: str, **fields: Any) -> None:
    await services.router.deliver(
        inbound(
            f"mail {n}",
            channel="email",
            sender=OWNER_MAIL,
            identity_verified=True,
            subject=subject,
            message_ref=f"<r{n}@example.org>",
            **fields,
        )
    )
    await settle(services)


@pytest.mark.parametrize(
    "subject",
    [
        "Re: Trip",
        "Antw: Trip",
        "Odp: Trip",
        "R: Trip",
        "回复: Trip",
        "Vá: Trip",
        "ΑΠ: Trip",
        "RE[2]: Trip",
        "[EXTERNAL] RE: Trip",
        "RE: [EXTERNAL] Re: [EXTERNAL] Trip",
        "AW: Fwd: trip",
    ],
)
async def test_a_reply_without_headers_joins_by_subject_in_any_language(
    services: Any, subject: str
) -> None:
    # Regression: the core knew only re/aw/sv and no tags while the channel folded many
    # more prefixes; "Antw: Trip" without In-Reply-To started a new conversation.
    first = "[EXTERNAL] Trip" if "EXTERNAL" in subject else "Trip"
    await _mail(services, 1, first)
    await _mail(services, 2, subject)
    convs = await services.conversations.list(channel="email", limit=10)
    assert len(convs) == 1, [c.channel_meta.get("subject") for c in convs]


async def test_a_new_mail_with_the_same_subject_is_a_new_conversation(services: Any) -> None:
    await _mail(services, 1, "Trip")
    await _mail(services, 2, "Trip")
    await _mail(services, 3, "Fwd: Trip")  # a forward is a new topic
    assert len(await services.conversations.list(channel="email", limit=10)) == 3


def test_one_rule_for_the_reply_subject_and_the_thread_finder() -> None:
    for subject in ("Antw: [Ticket #4] Trip", "SV: Re[3]: Trip", "Σχετ: Trip"):
        assert normalise_subject(subject) == thread_subject(reply_subject(subject))


async def _conversations(services: Any) -> int:
    return len(await services.conversations.list(channel="email", limit=10))


async def test_the_owner_s_reply_all_to_another_s_thread_never_joins_by_subject(
    services: Any,
) -> None:
    # Regression (session 39): references we never saw took the subject rule, whoever
    # the mail was for. The owner's reply-all to Bob's own "Invoice" thread, the
    # assistant in Cc, joined the owner's private "Invoice" conversation (a lawyer's
    # bill), and with reply_all Bob read an answer written with it in context.
    await _mail(services, 1, "Invoice")
    await _mail(
        services,
        2,
        "Re: Invoice",
        thread_refs=("<bob-77@plumbing.example>",),
        metadata={"to": [BOB], "cc": [ASSISTANT]},
    )
    assert await _conversations(services) == 2
    # Without references too: Bob reads it, so it is Bob's thread as much as ours.
    await _mail(services, 3, "Re: Invoice", metadata={"to": [ASSISTANT], "cc": [BOB]})
    assert await _conversations(services) == 3


async def test_unknown_references_join_by_subject_only_when_they_are_ours(
    services: Any,
) -> None:
    await _mail(services, 1, "Trip")
    # The owner answered a newsletter's "Trip" and added the assistant: not ours.
    await _mail(
        services,
        2,
        "Re: Trip",
        thread_refs=("<news-5@travel.example>",),
        metadata={"to": [ASSISTANT]},
    )
    assert await _conversations(services) == 2
    # A reply to a mail of ours whose record is gone: our thread, found by subject
    # (the owner's own other address in Cc is nobody else).
    ours = f"<my-agent.{'0' * 32}@example.com>"
    await _mail(
        services,
        3,
        "AW: Trip",
        thread_refs=(ours, "<news-5@travel.example>"),
        metadata={"to": [ASSISTANT], "cc": [OWNER_MAIL]},
    )
    assert await _conversations(services) == 2


async def test_a_reply_naming_only_an_outlook_thread_still_joins_by_subject(
    services: Any,
) -> None:
    # A gateway dropped In-Reply-To and References; the channel's reference for the
    # Outlook thread (unknown: never answered there) names no mail.
    await _mail(services, 1, "Trip")
    await _mail(
        services,
        2,
        "RE: Trip",
        thread_refs=(f"thread-index:{OWNER_MAIL}:AQHZ",),
        metadata={"to": [ASSISTANT]},
    )
    assert await _conversations(services) == 1


def test_our_message_ids_are_recognised_as_ours() -> None:
    mail = OutboundMessage(channel="email", chat_id=OWNER_MAIL, text="hi", send_key="c:1")
    sent = stable_message_id(mail, "hi", "Assistant@Example.com")
    assert sent is not None and own_message_id(sent, ASSISTANT)
    assert not own_message_id(sent, "assistant@elsewhere.example")
    assert not own_message_id("<e2e-1@example.com>", ASSISTANT)


async def test_a_reply_without_headers_keeping_a_changed_subject_joins_the_thread(
    tmp_path: Path,
) -> None:
    # Regression (session 39): the rule compared with the subject the conversation
    # started with only. The thread went "Trip", then "Re: Trip - now Porto" (our
    # answers follow it); the phone's reply without references to the new subject
    # started a new conversation.
    config = make_config(tmp_path, owner={"identities": owner_identities()})
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("email"))
        await _mail(services, 1, "Trip")
        await _mail(services, 2, "Re: Trip - now Porto", thread_refs=("<r1@example.org>",))
        await _mail(services, 3, "Re: Trip - now Porto")  # no In-Reply-To, no References
        [conv] = await services.conversations.list(channel="email", limit=10)
        assert conv.channel_meta["subject"] == "Trip"  # (what names it)
        assert conv.channel_meta["subjects"] == ["Re: Trip - now Porto"]  # once
        # a bounce joining by its reference brings no subject of the thread's
        await _mail(
            services,
            4,
            "Undelivered Mail Returned to Sender",
            thread_refs=("<r3@example.org>",),
            addressed=False,
        )
        assert len(await services.conversations.list(channel="email", limit=10)) == 1
        conv = await services.conversations.require(conv.id)
        assert conv.channel_meta["subjects"] == ["Re: Trip - now Porto"]
    finally:
        await shutdown_services(services)
    # The transcript says it (a meta_update line): a rebuilt index has it too.
    config.index_path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{config.index_path}{suffix}").unlink(missing_ok=True)
    services = await open_services(config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("email"))
        await _mail(services, 5, "AW: trip - NOW Porto")
        [conv] = await services.conversations.list(channel="email", limit=10)
        assert conv.channel_meta["subjects"] == ["Re: Trip - now Porto"]
    finally:
        await shutdown_services(services)


def test_a_thread_keeps_its_latest_subjects() -> None:
    when = "2025-01-14T09:12:00Z"
    rec = ConversationRecord(
        id="c", channel="email", created=when, updated=when, channel_meta={"subject": "Trip"}
    )
    for n in range(KEPT_SUBJECTS + 2):
        rec.channel_meta["subjects"] = new_subjects(rec, inbound("x", subject=f"Re: Leg {n}"))
    assert rec.channel_meta["subjects"] == [f"Re: Leg {n}" for n in range(2, KEPT_SUBJECTS + 2)]
    assert new_subjects(rec, inbound("x", subject="RE: trip")) is None
    assert new_subjects(rec, inbound("x", subject="Re:")) is None


def test_a_long_subject_cut_in_our_answer_is_the_threads_own() -> None:
    # Our answers cut a long subject (session 41): the replies to them, which carry the
    # cut one, are the thread's subject, not a new one.
    when = "2025-01-14T09:12:00Z"
    long = " ".join(f"point{n}" for n in range(800))
    rec = ConversationRecord(
        id="c", channel="email", created=when, updated=when, channel_meta={"subject": long}
    )
    answered = reply_subject(long)
    assert len(answered) < len(long)
    assert new_subjects(rec, inbound("x", subject=answered)) is None
    assert new_subjects(rec, inbound("x", subject="RE: " + answered)) is None
    assert new_subjects(rec, inbound("x", subject="Re: point0 point1")) == ["Re: point0 point1"]


def test_a_conversation_time_without_an_offset_is_aged_as_utc() -> None:
    # Regression (session 42): an ``updated`` without an offset (a transcript's line
    # written by hand) stayed naive, and "aware now minus naive" raised TypeError out of
    # the subject rule; every stored time without one is UTC (bot/moments.py).
    stamp = (utcnow() - timedelta(days=2)).replace(tzinfo=None).isoformat()
    assert 1.9 < _age_days(stamp) < 2.1
    assert 1.9 < _age_days(stamp + "Z") < 2.1
    assert _age_days("garbage") == float("inf")  # as before: never in the window
