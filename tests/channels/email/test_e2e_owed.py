"""End to end, a reply a stop left owed: at the next start it goes out after the mail
that came while the daemon was down is recorded, threaded under what it answers.

The daemon's start waits for the e-mail channel's first check at most 10 s; a slower
one (a big mailbox, a slow server) let the outbox send the owed reply before the
owner's mail written meanwhile ("never mind, make it Porto") was even recorded."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from channels.email.imap import ImapSession
from channels.email.inbox import Inbox
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    Stack,
    close_stack,
    conversation_of,
    open_in_new_folder,
    open_stack,
    owner_mail,
    wait_ref,
)

FIRST = "<e2e-70@example.org>"
MEANWHILE = "<e2e-71@example.org>"


class Said(logging.Handler):
    """Sets ``event`` when a log line contains ``words``."""

    def __init__(self, words: str, event: asyncio.Event) -> None:
        super().__init__(logging.INFO)
        self.words = words
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


async def tried_to_send(stack: Stack) -> None:
    async with asyncio.timeout(30):
        while not await stack.services.outbox.db.fetchall(
            "SELECT id FROM outbox WHERE status = 'pending' AND attempts > 0"
        ):
            await asyncio.sleep(0.05)


async def test_a_reply_owed_at_start_goes_out_after_the_mail_that_came_meanwhile(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    smtp.capture.reject_mail = "451 4.3.0 Try again later"
    await append(pymap.port, folder, owner_mail(70, "Plan a trip to Lisbon.", subject="Trip"))
    conv = await wait_ref(stack, FIRST)
    await tried_to_send(stack)
    await close_stack(stack)  # the daemon stops, the answer still owed
    stacks.remove(stack)
    smtp.capture.reject_mail = None
    meanwhile = owner_mail(71, "Never mind, make it Porto.", "Re: Trip", in_reply_to=FIRST)
    await append(pymap.port, folder, meanwhile)

    # The next start's first check is slow: it goes on once the owed reply is either
    # waiting for it (the fix) or at the SMTP server (before: sent first).
    go_on = asyncio.Event()
    sync = Inbox.sync

    async def slow_first_check(inbox: Inbox, session: ImapSession) -> bool:
        await go_on.wait()
        return await sync(inbox, session)

    monkeypatch.setattr(Inbox, "sync", slow_first_check)
    capture = smtp.capture
    handle_mail, handle_data = capture.handle_MAIL, capture.handle_DATA
    recorded_when_sent: list[bool] = []

    async def at_mail(*args: Any) -> str:
        go_on.set()
        return await handle_mail(*args)

    async def at_data(*args: Any) -> str:
        recorded_when_sent.append(await conversation_of(stacks[-1], MEANWHILE) is not None)
        return await handle_data(*args)

    monkeypatch.setattr(capture, "handle_MAIL", at_mail)
    monkeypatch.setattr(capture, "handle_DATA", at_data)
    waiting = Said("waits for the first check", go_on)
    logger = logging.getLogger("my_agent.email")
    logger.addHandler(waiting)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        restarted = await open_stack(stack.config, opened=stacks)
        owed, answer = await capture.wait_for(2)
    finally:
        logger.removeHandler(waiting)
        logger.setLevel(level)
    assert recorded_when_sent[0] is True
    assert await conversation_of(restarted, MEANWHILE) == conv
    # Each threaded under what it answers, the owed one too.
    assert (owed["In-Reply-To"], owed["References"]) == (FIRST, FIRST)
    assert answer["In-Reply-To"] == MEANWHILE
    assert answer["References"].split() == [FIRST, MEANWHILE]
