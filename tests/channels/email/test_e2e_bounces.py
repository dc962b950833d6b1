"""End to end: delivery status notifications (bounces) of the mail we sent are recorded,
never answered; the owner is told what failed, to whom and why, and a bounce of the
mail that tells them is not told again by mail (a loop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.config.model import AppConfig
from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    FRIEND,
    OWNER,
    Stack,
    drain,
    open_in_new_folder,
    open_with_friend,
    owner_mail,
)
from tests.channels.email.test_e2e_automatic import sent_to

STRANGER = "stranger@example.org"


def postfix_bounce(n: int, mta: str, recipient: str, original_id: str, subject: str) -> bytes:
    """A bounce as Postfix sends it: a notice whose first lines are boilerplate, the
    report, the returned headers; no In-Reply-To."""
    boundary = f"B{n}.1736842800/{mta}"
    return (
        f"Return-Path: <>\r\n"
        f"Date: Tue, 14 Jan 2025 09:20:0{n % 10} +0100\r\n"
        f"From: MAILER-DAEMON@{mta} (Mail Delivery System)\r\n"
        f"Subject: Undelivered Mail Returned to Sender\r\n"
        f"To: {USER}\r\n"
        f"MIME-Version: 1.0\r\n"
        f"Content-Type: multipart/report; report-type=delivery-status;\r\n"
        f'\tboundary="{boundary}"\r\n'
        f"Message-Id: <bounce-{n}@{mta}>\r\n\r\n"
        f"This is a MIME-encapsulated message.\r\n\r\n"
        f"--{boundary}\r\nContent-Description: Notification\r\n"
        f"Content-Type: text/plain; charset=us-ascii\r\n\r\n"
        f"This is the mail system at host {mta}.\r\n\r\n"
        f"I'm sorry to have to inform you that your message could not\r\n"
        f"be delivered to one or more recipients. It's attached below.\r\n\r\n"
        f"For further assistance, please send mail to postmaster.\r\n\r\n"
        f"If you do so, please include this problem report. You can\r\n"
        f"delete your own text from the attached returned message.\r\n\r\n"
        f"                   The mail system\r\n\r\n"
        f"<{recipient}>: host mail.{mta} said: 550 5.1.1\r\n"
        f"    <{recipient}>: Recipient address rejected: User unknown in virtual\r\n"
        f"    mailbox table (in reply to RCPT TO command)\r\n\r\n"
        f"--{boundary}\r\nContent-Description: Delivery report\r\n"
        f"Content-Type: message/delivery-status\r\n\r\n"
        f"Reporting-MTA: dns; {mta}\r\nArrival-Date: Tue, 14 Jan 2025 09:19:58 +0100\r\n\r\n"
        f"Final-Recipient: rfc822; {recipient}\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        f"Diagnostic-Code: smtp; 550 5.1.1 <{recipient}>: Recipient address\r\n"
        f"    rejected: User unknown in virtual mailbox table\r\n\r\n"
        f"--{boundary}\r\nContent-Description: Undelivered Message Headers\r\n"
        f"Content-Type: text/rfc822-headers\r\n\r\n"
        f"From: My Assistant <{USER}>\r\nTo: {recipient}\r\nSubject: {subject}\r\n"
        f"Message-ID: {original_id}\r\nDate: Tue, 14 Jan 2025 09:19:57 +0100\r\n\r\n"
        f"--{boundary}--\r\n"
    ).encode()


async def wait_said(stack: Stack, sender: str, count: int = 1) -> list[dict[str, object]]:
    """What the party ``sender`` sent, once they have sent ``count`` messages."""
    async with asyncio.timeout(10):
        while True:
            for party in await stack.services.external.list_parties():
                if party.party_key == sender:
                    said = await stack.services.external.messages(party.id)
                    if sum(m["direction"] == "in" for m in said) >= count:
                        return said
            await asyncio.sleep(0.05)


async def test_a_bounce_tells_the_owner_what_failed_and_is_not_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The owner's escalation quoted the bounce's first 500 characters: the reporting
    # server's boilerplate ("This is the mail system at host ..."); which mail had
    # failed, and why, came after the cut.
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(
        pymap.port, folder, owner_mail(1, "Dinner on Friday?", subject="Dinner", sender=FRIEND)
    )
    [answer] = await smtp.capture.wait_for(1)
    mta = "mx.example.net"
    await append(
        pymap.port, folder, postfix_bounce(1, mta, FRIEND, answer["Message-ID"], answer["Subject"])
    )
    said = await wait_said(stack, f"mailer-daemon@{mta}")
    [escalation] = (await smtp.capture.wait_for(2))[1:]
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    body = text_of(escalation)
    assert escalation["To"] == OWNER
    assert 'Delivery failed: the mail to friend@example.net ("Re: Dinner")' in body
    assert "User unknown" in body
    assert str(said[-1]["content"]).startswith("Delivery failed:")
    assert sent_to(smtp, f"mailer-daemon@{mta}") == []
    assert len(smtp.capture.messages) == 2


async def test_a_bounced_escalation_is_not_escalated_again_by_mail(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The owner's mailbox refused the escalation of a stranger's mail: its bounce was
    # escalated to that mailbox again, which bounced that one too (a mail loop, one
    # turn per escalation interval, and the owner never told).
    def no_acknowledgement(config: AppConfig) -> None:
        config.trust.acknowledgement = None

    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, no_acknowledgement)
    await append(
        pymap.port, folder, owner_mail(2, "Hello there", subject="Hi", sender=STRANGER, auth=None)
    )
    [escalation] = await smtp.capture.wait_for(1)
    assert escalation["To"] == OWNER
    mta = "mx.example.org"
    await append(
        pymap.port,
        folder,
        postfix_bounce(2, mta, OWNER, escalation["Message-ID"], escalation["Subject"]),
    )
    await wait_said(stack, f"mailer-daemon@{mta}")
    async with asyncio.timeout(10):  # recorded for the dashboard
        while len(await stack.services.external.pending_escalations()) < 2:
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # time for any (wrong) mail to be queued
    await drain(stack)
    assert len(smtp.capture.messages) == 1
