"""End to end, newsletters: one sent to the assistant's address is recorded and never
answered (an answer to a list reaches everyone on it); the owner forwarding it with
"summarise this", inline or as an attached mail, is answered, and to the owner alone,
with reply_all on."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from pathlib import Path

from bot.config.model import AppConfig
from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    OWNER,
    Stack,
    drain,
    good_auth,
    open_in_new_folder,
    owner_mail,
    wait_ref,
)

NEWS = "news@shop.example"
NEWS_REPLY = "replies@lists.shop.example"


def newsletter() -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = f"Shop News <{NEWS}>"
    msg["To"] = USER
    msg["Reply-To"] = NEWS_REPLY
    msg["Subject"] = "Black Friday: 40% off everything"
    msg["Message-ID"] = "<nl-1@shop.example>"
    msg["Date"] = "Fri, 27 Nov 2026 06:00:00 +0000"
    msg["List-Id"] = "Shop News <news.shop.example>"
    msg["List-Unsubscribe"] = "<https://shop.example/u/1>, <mailto:unsub@shop.example>"
    msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg["Precedence"] = "bulk"
    msg["Authentication-Results"] = good_auth("shop.example")
    msg.set_content("Everything is 40% off until Monday. Free shipping over 50 EUR.")
    return msg


def reply_all(config: AppConfig) -> None:
    assert config.channels.email is not None
    config.channels.email.reply_all = True


async def test_a_newsletter_is_recorded_never_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, reply_all)
    await append(pymap.port, folder, newsletter())
    async with asyncio.timeout(30):
        while not await stack.services.external.list_parties():
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    recipients = {r for envelope, _ in smtp.capture.messages for r in envelope.rcpt_tos}
    assert recipients <= {OWNER}  # at most the owner's escalation


async def test_the_owner_s_forward_of_a_newsletter_is_answered_to_the_owner_alone(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, reply_all)
    inline = owner_mail(
        90,
        "Summarise this please.\n\n---------- Forwarded message ---------\n"
        f"From: Shop News <{NEWS}>\nDate: Fri, 27 Nov 2026 at 07:00\n"
        "Subject: Black Friday: 40% off everything\nTo: <owner@example.org>\n\n"
        "Everything is 40% off until Monday. Free shipping over 50 EUR.\n",
        subject="Fwd: Black Friday: 40% off everything",
    )
    attached = owner_mail(91, "Summarise this one too.", subject="FW: Black Friday")
    attached.add_attachment(newsletter())  # Outlook's "Forward as Attachment"
    for n, mail in ((90, inline), (91, attached)):
        await append(pymap.port, folder, mail)
        conv = await wait_ref(stack, f"<e2e-{n}@example.org>")
        # kept beside the owner's words, not as them (bot/forwards.py, session 41)
        assert any(
            "40% off until Monday" in line["metadata"]["forwarded"]["text"]
            for line in stack.services.store.read_lines(conv)
            if line.get("type") == "turn" and line.get("role") == "user"
        )
    replies = await smtp.capture.wait_for(2)
    await drain(stack)
    assert sorted(m["In-Reply-To"] for m in replies) == [
        "<e2e-90@example.org>",
        "<e2e-91@example.org>",
    ]
    assert [envelope.rcpt_tos for envelope, _ in smtp.capture.messages] == [[OWNER], [OWNER]]
