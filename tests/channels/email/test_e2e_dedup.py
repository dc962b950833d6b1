"""End to end: which mails the core drops as ones it already has.

A sender that reuses a Message-ID for new content (a cron job, a monitoring alert) sends
a new message each time; a true redelivery of one mail (a restart, an IMAP re-scan, a
second copy in the folder) is still dropped."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from bot.events import InboundMessage
from bot.services import open_services
from channels.email.adapter import EmailChannel
from tests.channels.email.conftest import (
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    imap_client,
)
from tests.channels.email.stack import (
    GOOD_AUTH,
    OWNER,
    Stack,
    drain,
    e2e_config,
    open_in_new_folder,
    owner_mail,
    user_turns,
    wait_ref,
)


async def test_a_reused_message_id_with_new_content_is_a_new_message(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # A backup job that always sends <backup@example.org>: its second report was dropped
    # as a duplicate of the first, silently; nothing recorded it.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    first = owner_mail(1, "Backup of Monday: OK.", subject="Backup report")
    first.replace_header("Message-ID", "<backup@example.org>")
    second = owner_mail(2, "Backup of Tuesday: FAILED, disk full.", subject="Backup report")
    second.replace_header("Message-ID", "<backup@example.org>")
    second.replace_header("Date", "Wed, 15 Jan 2025 09:12:00 +0100")
    await append(pymap.port, folder, first)
    await smtp.capture.wait_for(1)
    await append(pymap.port, folder, second)
    await smtp.capture.wait_for(2)
    await drain(stack)
    turns = [
        turn
        for rec in await stack.services.conversations.list(channel="email", limit=10)
        for turn in user_turns(stack, rec.id)
    ]
    assert any("Monday" in t for t in turns) and any("disk full" in t for t in turns)
    assert [m["To"] for _, m in smtp.capture.messages] == [OWNER, OWNER]


async def test_a_second_copy_of_the_same_mail_is_still_dropped(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The same mail twice in the folder (sent To and Cc two aliases of the mailbox, each
    # copy with its own Received header) is one message: recorded and answered once.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    mail = owner_mail(3, "Book the dentist.", subject="Dentist")
    await append(pymap.port, folder, b"Received: from a.example by mx\r\n" + mail.as_bytes())
    await append(pymap.port, folder, b"Received: from b.example by mx\r\n" + mail.as_bytes())
    conv = await wait_ref(stack, "<e2e-3@example.org>")
    await smtp.capture.wait_for(1)
    await asyncio.sleep(1.0)  # time for a (wrong) second answer
    await drain(stack)
    assert len(smtp.capture.messages) == 1
    assert len(user_turns(stack, conv)) == 1


async def test_a_strangers_reused_message_id_is_recorded_each_time(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # A third party's monitoring alert with a fixed Message-ID: only the first alert was
    # in their file and reached the owner.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    for n, (day, text) in enumerate([("14", "CPU at 95%"), ("15", "Disk at 99%")]):
        alert = owner_mail(10 + n, text, subject="Alert", sender="monitor@example.net", auth=None)
        alert.replace_header("Message-ID", "<alert@example.net>")
        alert.replace_header("Date", f"Tue, {day} Jan 2025 09:12:00 +0100")
        await append(pymap.port, folder, alert)
    async with asyncio.timeout(20):
        while True:
            parties = await stack.services.external.list_parties()
            said = (
                [m["content"] for m in await stack.services.external.messages(parties[0].id)]
                if parties
                else []
            )
            if any("Disk" in str(s) for s in said):
                break
            await asyncio.sleep(0.05)
    assert any("CPU" in str(s) for s in said)


async def folder_uidvalidity(port: int, folder: str) -> str:
    client = await imap_client(port)
    try:
        response = await client.select(folder)
        found = re.search(rb"UIDVALIDITY (\d+)", b" ".join(bytes(x) for x in response.lines))
        assert found is not None, response
        return found.group(1).decode()
    finally:
        await client.logout()


async def test_a_mail_delivered_under_the_old_key_is_still_dropped_after_the_upgrade(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # An installation that ran before the content keys: the core knows the mail by its
    # bare Message-ID. A crash between delivery and \Seen, then the upgrade: the mail is
    # fetched again, and with the new key it would be recorded and answered twice.
    folder = await create_folder(pymap.port)
    config = e2e_config(tmp_path, pymap.port, smtp.port, folder)
    mail = owner_mail(40, "Renew the passport.", subject="Passport")
    await append(pymap.port, folder, mail)
    services = await open_services(config)
    await services.router.deliver(
        InboundMessage(
            channel="email",
            sender_id=OWNER,
            chat_id=OWNER,
            text="Renew the passport.",
            message_id="<e2e-40@example.org>",  # the key an older version gave it
            message_ref="<e2e-40@example.org>",
            subject="Passport",
            identity_verified=True,
        )
    )
    # the cursors it left: the folder read, the UID cursor not yet past the mail
    await services.router.set_cursor(
        "email", f"{folder}:uidvalidity", await folder_uidvalidity(pymap.port, folder)
    )
    await services.router.set_cursor("email", f"{folder}:last_uid", "0")
    services.outbox.base_delay = 0.05
    channel = EmailChannel(config, services)
    services.channels["email"] = channel
    services.outbox.attach(channel)
    await channel.start(services.router)
    services.ready = True
    stack = Stack(config, services, channel)
    stacks.append(stack)
    conv = await wait_ref(stack, "<e2e-40@example.org>")
    # Mail after the upgrade has the new key: the same Message-ID, new content, is new.
    again = owner_mail(41, "And the ID card.", subject="Passport")
    again.replace_header("Message-ID", "<e2e-40@example.org>")
    again.replace_header("Date", "Wed, 15 Jan 2025 09:12:00 +0100")
    await append(pymap.port, folder, again)
    await smtp.capture.wait_for(2)
    await asyncio.sleep(1.0)  # time for a (wrong) third answer
    await drain(stack)
    assert user_turns(stack, conv) == ["Renew the passport."]
    turns = [
        turn
        for rec in await services.conversations.list(channel="email", limit=10)
        for turn in user_turns(stack, rec.id)
    ]
    assert sorted(turns) == ["Renew the passport.", "Subject: Passport\n\nAnd the ID card."]
    assert len(smtp.capture.messages) == 2


def raw_mail(message_id: bytes, body: bytes, subject: bytes, extra: bytes = b"") -> bytes:
    return (
        extra + b"From: Owner <" + OWNER.encode() + b">\r\n"
        b"To: bot@example.com\r\n"
        b"Subject: " + subject + b"\r\n"
        b"Message-ID: " + message_id + b"\r\n"
        b"Date: Tue, 14 Jan 2025 09:12:00 +0100\r\n"
        b"Authentication-Results: " + GOOD_AUTH.encode() + b"\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n" + body + b"\r\n"
    )


async def test_a_message_id_with_a_space_still_threads_and_deduplicates(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Real mailers send "<trip plan 7@example.org>": it was taken for no Message-ID, so a
    # second copy of the mail (its own Received header) was answered again, and a mail
    # naming it in In-Reply-To found no thread (a new conversation).
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    first = raw_mail(b"<trip plan 7@example.org>", b"Find me a train.", b"Trip")
    await append(pymap.port, folder, first)
    [reply] = await smtp.capture.wait_for(1)
    assert reply["In-Reply-To"] == "<tripplan7@example.org>"
    conv = await wait_ref(stack, "<tripplan7@example.org>")
    copy = b"Received: from relay2.example.org by mx.example.com\r\n" + first
    follow_up = raw_mail(b"<e2e-71@example.org>", b"And a hotel.", b"Hotel")
    follow_up = follow_up.replace(
        b"\r\n\r\n", b"\r\nIn-Reply-To: <trip plan 7@example.org>\r\n\r\n", 1
    )
    await append(pymap.port, folder, copy)
    await append(pymap.port, folder, follow_up)
    assert await wait_ref(stack, "<e2e-71@example.org>") == conv
    await smtp.capture.wait_for(2)
    await drain(stack)
    assert user_turns(stack, conv) == [
        "Subject: Trip\n\nFind me a train.",
        "Subject: Hotel\n\nAnd a hotel.",
    ]
    assert len(smtp.capture.messages) == 2
