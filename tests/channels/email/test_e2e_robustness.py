"""End to end: mail that is unusual in size or shape, through the real core."""

from __future__ import annotations

from pathlib import Path

from bot.config.model import AppConfig
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    OWNER,
    Stack,
    drain,
    open_in_new_folder,
    owner_mail,
    wait_ref,
)
from tests.support import wait_until


async def test_a_big_mail_is_stored_once(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # A 1 MB log pasted into a mail was stored twice in its turn: as the text and again
    # as metadata.full_body, although nothing had been stripped from it (2 MB in the
    # transcript, 2 MB more in the journal).
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    log = "\n".join(f"12:00:{n % 60:02d} worker finished its batch" for n in range(30000))
    await append(pymap.port, folder, owner_mail(1, log, subject="Logs"))
    conv = await wait_ref(stack, "<e2e-1@example.org>", timeout=60)
    await smtp.capture.wait_for(1, timeout=60)
    [turn] = [
        line
        for line in stack.services.store.read_lines(conv)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
    assert turn["content"] == "Subject: Logs\n\n" + log
    assert "full_body" not in turn["metadata"]
    transcript = tmp_path / "conversations" / f"{conv}.jsonl"
    assert transcript.stat().st_size < 1.2 * len(log)


async def test_a_cc_refused_for_now_gets_the_outbox_retry_alone(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Through the real outbox: the reply-all went to the owner and Anna while the server
    # refused Ben for now (451); it counted as sent and Ben never had it. The outbox now
    # retries it, to Ben alone, under the same Message-ID.
    def reply_all(config: AppConfig) -> None:
        config.channels.email.reply_all = True

    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, reply_all)
    smtp.capture.reject_rcpt["ben@example.org"] = "451 4.7.1 Greylisted, try again"
    mail = owner_mail(1, "Dinner on Friday?", subject="Dinner")
    mail["Cc"] = "anna@example.org, ben@example.org"
    await append(pymap.port, folder, mail)
    [first] = await smtp.capture.wait_for(1)
    # a retry, refused again (counted by the server; was: a fixed 0.3 s)
    await wait_until(lambda: smtp.capture.rejected.count("ben@example.org") >= 2)
    del smtp.capture.reject_rcpt["ben@example.org"]
    [_, again] = await smtp.capture.wait_for(2)
    await drain(stack)
    assert [e.rcpt_tos for e, _ in smtp.capture.messages] == [
        [OWNER, "anna@example.org"],
        ["ben@example.org"],
    ]
    assert again["Message-ID"] == first["Message-ID"]
    assert await wait_ref(stack, first["Message-ID"]) == await wait_ref(
        stack, "<e2e-1@example.org>"
    )
