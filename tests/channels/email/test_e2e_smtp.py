"""End to end, an SMTP server as it answers in the wild: greylisting (4xx after DATA)
then success, a permanent refusal (5xx) and a connection dropped after DATA. The real
core with the offline brain and its outbox, pymap and aiosmtpd."""

from __future__ import annotations

from pathlib import Path

from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    OWNER,
    Stack,
    drain,
    open_in_new_folder,
    owner_mail,
    wait_ref,
)


async def test_a_greylisted_reply_is_retried_and_sent_once(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    smtp.capture.data_answers = ["451 4.7.1 Greylisted, try again later"] * 2
    await append(pymap.port, folder, owner_mail(80, "Remind me to call mum.", subject="Mum"))
    [reply] = await smtp.capture.wait_for(1)
    assert reply["In-Reply-To"] == "<e2e-80@example.org>"
    await drain(stack)
    assert smtp.capture.data_answers == []  # refused twice, then taken
    assert len(smtp.capture.messages) == 1


async def test_a_reply_refused_for_good_is_kept_and_the_owner_told_once(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    smtp.capture.data_answers = ["554 5.7.1 Message rejected as spam"]
    await append(pymap.port, folder, owner_mail(81, "Remind me to call mum.", subject="Mum"))
    conv = await wait_ref(stack, "<e2e-81@example.org>")
    [notice] = await smtp.capture.wait_for(1)  # not retried: the next mail is the notice
    await drain(stack)
    assert notice["To"] == OWNER
    assert "554 5.7.1 Message rejected as spam" in str(text_of(notice))
    assert len(smtp.capture.messages) == 1  # told once, the reply not sent again
    # the answer is kept in its conversation: the owner can read it on the dashboard
    turns = [
        line
        for line in stack.services.store.read_lines(conv)
        if line.get("type") == "turn" and line.get("role") == "assistant"
    ]
    assert len(turns) == 1 and turns[0]["content"]


async def test_a_connection_dropped_after_data_sends_again_under_one_message_id(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The server took the mail and hung up before its "250": sent or not, the sender
    # cannot know. We send again (a reply lost is worse than one shown twice), under the
    # same Message-ID, which mail clients show once.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    smtp.capture.hang_up_after_data = 1
    await append(pymap.port, folder, owner_mail(82, "Remind me to call mum.", subject="Mum"))
    first, again = await smtp.capture.wait_for(2)
    await drain(stack)
    assert first["Message-ID"] == again["Message-ID"]
    assert again["In-Reply-To"] == "<e2e-82@example.org>"
    assert len(smtp.capture.messages) == 2
