"""The thread finder's subject fallback (bot/resolver.py): a reply that lost its
In-Reply-To and References joins its conversation by subject, whatever language or
gateway tag its prefix came in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.mail_subjects import reply_subject, thread_subject
from bot.resolver import normalise_subject
from bot.services import open_services
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


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Any]:
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
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
