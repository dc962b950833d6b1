"""The real core with the e-mail channel, for the end-to-end tests: pymap ->
EmailChannel -> the core (router, store, outbox, offline brain) -> EmailChannel ->
aiosmtpd. A test opens a :class:`Stack` (:func:`open_in_new_folder`) and hands it to the
``stacks`` fixture (conftest), which closes it. With :data:`FRIEND` a known contact
(:func:`open_with_friend`) the brain answers them as a model would
(:class:`tests.known_answered.KnownAnswered`): the offline brain does not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from bot.config.model import AppConfig
from bot.daemon import wire_channels
from bot.services import Services, close_services, open_services
from channels.email.adapter import EmailChannel
from tests.channels.email.conftest import (
    USER,
    PymapServer,
    SmtpServer,
    create_folder,
    email_channel,
)
from tests.known_answered import known_contacts_answered
from tests.support import wait_until

OWNER = "owner@example.org"
FRIEND = "friend@example.net"
GOOD_AUTH = "mx.example.com; dkim=pass header.d=example.org; spf=pass smtp.mailfrom=example.org"


def good_auth(domain: str) -> str:
    """The receiving server's pass for mail from ``domain``."""
    return f"mx.example.com; dkim=pass header.d={domain}; spf=pass smtp.mailfrom={domain}"


def e2e_config(
    data_dir: Path, imap_port: int, smtp_port: int, folder: str, **imap: Any
) -> AppConfig:
    return AppConfig.model_validate(
        {
            "data_dir": str(data_dir),
            "owner": {"identities": {"email": [OWNER]}},
            "brain": {"provider": "offline"},
            "embedding": {"enabled": False},
            "trust": {"escalation_channel": "email"},
            "channels": {
                "web": {"enabled": False},
                "email": email_channel(
                    imap_port,
                    smtp_port,
                    folder,
                    imap=imap,
                    smtp={"timeout": 3},
                    auth_serv_id="mx.example.com",
                ),
            },
        }
    )


@dataclass
class Stack:
    config: AppConfig
    services: Services
    channel: EmailChannel
    # known contacts answered (tests/known_answered.py), after a restart too
    answers_known: bool = False


async def open_stack(
    config: AppConfig, opened: list[Stack] | None = None, *, answers_known: bool = False
) -> Stack:
    """The core and the channel, started; ``opened`` gets the stack before the channel
    starts (a test looking into the core while the first check runs). With
    ``answers_known`` a known contact is answered as a model would (the offline brain
    answers none since session 41)."""
    if answers_known:
        with known_contacts_answered():
            services = await open_services(config)
    else:
        services = await open_services(config)
    services.outbox.base_delay = 0.05  # fast retries: the SMTP outage test waits on them
    channel = EmailChannel(config, services)
    wire_channels(services, [channel])  # the wiring bot/daemon.py does for every channel
    services.outbox.attach(channel)
    stack = Stack(config, services, channel, answers_known)
    if opened is not None:
        opened.append(stack)
    await channel.start(services.router)
    services.ready = True
    return stack


async def open_in_new_folder(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    adjust: Callable[[AppConfig], None] | None = None,
    *,
    answers_known: bool = False,
) -> tuple[str, Stack]:
    """A new folder and a stack reading it, closed by the ``stacks`` fixture (conftest);
    ``adjust`` changes the stack's config first; ``answers_known``: :func:`open_stack`'s."""
    folder = await create_folder(pymap.port)
    config = e2e_config(tmp_path, pymap.port, smtp.port, folder)
    if adjust is not None:
        adjust(config)
    stack = await open_stack(config, answers_known=answers_known)
    stacks.append(stack)
    return folder, stack


def knows_friend(config: AppConfig) -> None:
    """:data:`FRIEND` is a known contact."""
    config.trust.contacts["email"] = {FRIEND: "known"}


async def open_with_friend(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> tuple[str, Stack]:
    """A new folder and a daemon reading it, with :data:`FRIEND` a known contact whom
    it answers (as a model would: :func:`open_stack`)."""
    return await open_in_new_folder(pymap, smtp, tmp_path, stacks, knows_friend, answers_known=True)


async def failed_attempts(stack: Stack, count: int, timeout: float = 60.0) -> None:
    """Until a reply waiting in the outbox has failed ``count`` attempts (the SMTP server
    down): counted, where a fixed sleep could end before the reply was even queued."""

    async def tried() -> bool:
        outbox = stack.services.outbox
        rows = await outbox.db.fetchall("SELECT id, attempts FROM outbox WHERE status = 'pending'")
        # a server down is an outage: those tries are not counted in the row's attempts
        unreached = outbox.unreachable_tries()
        return any(attempts + unreached.get(row_id, 0) >= count for row_id, attempts in rows)

    await wait_until(tried, timeout, f"a reply in the outbox to fail {count} attempt(s)")


async def drain(stack: Stack, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while await stack.services.outbox.pending_count():
            await asyncio.sleep(0.05)


async def close_stack(stack: Stack) -> None:
    await stack.channel.stop()
    await close_services(stack.services)


async def stop_stack(stack: Stack, stacks: list[Stack]) -> None:
    """The daemon stops (``stacks``, the fixture's list, no longer closes it)."""
    await close_stack(stack)
    stacks.remove(stack)


async def start_again(stack: Stack, stacks: list[Stack]) -> Stack:
    """The daemon of the stopped ``stack`` started again on its data."""
    stacks.append(started := await open_stack(stack.config, answers_known=stack.answers_known))
    return started


def owner_mail(
    n: int,
    body: str,
    subject: str = "Trip planning",
    *,
    sender: str = OWNER,
    auth: str | None = GOOD_AUTH,
    in_reply_to: str | None = None,
    references: str | None = None,
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = f"Owner <{sender}>"
    msg["To"] = f"My Assistant <{USER}>"
    msg["Subject"] = subject
    msg["Message-ID"] = f"<e2e-{n}@example.org>"
    msg["Date"] = "Tue, 14 Jan 2025 09:12:00 +0100"
    if auth is GOOD_AUTH:  # a pass for whoever sends it (a known contact's mail too)
        auth = good_auth(sender.rsplit("@", 1)[-1])
    if auth:
        msg["Authentication-Results"] = auth
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = references
    msg.set_content(body)
    return msg


async def conversation_of(stack: Stack, ref: str) -> str | None:
    return await stack.services.index.conversation_for_ref("email", ref)


async def wait_ref(stack: Stack, ref: str, timeout: float = 30.0) -> str:
    async with asyncio.timeout(timeout):
        while (conv := await conversation_of(stack, ref)) is None:
            await asyncio.sleep(0.05)
    return conv


def user_turns(stack: Stack, conv: str) -> list[str]:
    """The text of every user turn stored in ``conv``, in order."""
    return [
        str(line["content"])
        for line in stack.services.store.read_lines(conv)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
