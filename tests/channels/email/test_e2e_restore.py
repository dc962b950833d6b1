"""End to end: an older backup of the data directory restored (channels/email/handled.py).

The UID cursor and the index go back in time, the mailbox does not: the mail received
since the backup lies above the cursor again. What an earlier run handled carries our
keyword on the server, and is recorded again without being answered; a server that
keeps no keywords (pymap's own folders, as Exchange) is said once to leave that open."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from channels.email.handled import HANDLED
from tests.channels.email.conftest import (
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    folder_state,
    start_pymap,
    stop_pymap,
)
from tests.channels.email.stack import (
    OWNER,
    Stack,
    drain,
    e2e_config,
    open_stack,
    owner_mail,
    stop_stack,
    user_turns,
    wait_ref,
)
from tests.conftest import settle

STRANGER = "eve@stranger.example"


@pytest.fixture(scope="module")
def keeping() -> Iterator[PymapServer]:
    """pymap whose folders keep our keyword, as Dovecot, Cyrus and Gmail do."""
    server = start_pymap(keywords=(HANDLED,))
    yield server
    stop_pymap(server)


async def test_a_restored_backup_answers_no_mail_again(
    keeping: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 40): a backup taken with the daemon stopped, two mails handled
    # after it, the backup restored: the owner's mail was answered again, the
    # stranger's acknowledged again and escalated again, and nothing was logged.
    folder = await create_folder(keeping.port)
    data = tmp_path / "data"
    config = e2e_config(data, keeping.port, smtp.port, folder)
    stacks.append(stack := await open_stack(config))
    await append(keeping.port, folder, owner_mail(1, "Plan A: the tomatoes.", subject="Plan A"))
    await smtp.capture.wait_for(1)
    await drain(stack)
    await stop_stack(stack, stacks)
    shutil.copytree(data, tmp_path / "backup")  # the nightly backup, daemon stopped

    stacks.append(stack := await open_stack(config))
    await append(keeping.port, folder, owner_mail(2, "Plan B: the beans.", subject="Plan B"))
    stranger = owner_mail(3, "Hello, who are you?", subject="Hello", sender=STRANGER, auth=None)
    await append(keeping.port, folder, stranger)
    await smtp.capture.wait_for(4)  # the reply, the acknowledgement, the escalation
    await settle(stack.services)
    await stop_stack(stack, stacks)
    flags = await folder_state(keeping.port, folder)
    assert len(flags) == 3 and all(HANDLED.encode() in line for line in flags.values())

    shutil.rmtree(data)
    shutil.copytree(tmp_path / "backup", data)  # restored
    before = len(smtp.capture.messages)
    stacks.append(stack := await open_stack(config))
    # told after the check that recorded them: every answer owed was queued by then
    notice = (await smtp.capture.wait_for(before + 1))[before]
    await settle(stack.services)
    again = smtp.capture.messages[before:]
    assert [m["Subject"] for _, m in again] == ["my-agent alert"]  # the owner told, no more
    assert notice["To"] == OWNER
    body = notice.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    assert "2 mails" in text and "restored from an older backup" in text
    # Nothing received is lost: both are recorded again, the owner's unanswered.
    conv = await wait_ref(stack, "<e2e-2@example.org>")
    assert user_turns(stack, conv) == ["Plan B: the beans."]
    (turn,) = [line for line in stack.services.store.read_lines(conv) if line.get("role") == "user"]
    assert turn["awaitReply"] is False
    (party,) = await stack.services.external.list_parties()
    msgs = await stack.services.external.messages(party.id)
    assert [(m["direction"], m["content"]) for m in msgs] == [("in", "Hello, who are you?")]


async def test_a_server_keeping_no_keywords_is_said_once(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    stacks: list[Stack],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # pymap's folders keep the system flags only: mail is marked \Seen as before, and
    # the log says once that a restore may answer mail again.
    caplog.set_level(logging.WARNING, "my_agent.email")
    folder = await create_folder(pymap.port)
    config = e2e_config(tmp_path, pymap.port, smtp.port, folder)
    stacks.append(stack := await open_stack(config))
    await append(pymap.port, folder, owner_mail(4, "Plan C.", subject="Plan C"))
    await append(pymap.port, folder, owner_mail(5, "Plan D.", subject="Plan D"))
    await smtp.capture.wait_for(2)
    await drain(stack)
    flags = await folder_state(pymap.port, folder)
    assert len(flags) == 2 and all(b"\\Seen" in line for line in flags.values())
    assert not any(HANDLED.encode() in line for line in flags.values())
    warned = [r.getMessage() for r in caplog.records if "keeps no keywords" in r.getMessage()]
    assert len(warned) == 1 and "restoring an older backup" in warned[0]
