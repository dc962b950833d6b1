"""Read receipts (channels/email/receipts.py). A mail client's receipt (RFC 8098) often
has no Auto-Submitted; before session 26 it became a turn of the client's boilerplate
("Your message ... was read on ...") in a conversation of its own, and one a gateway
wrapped in a multipart/mixed was answered like a person's mail. It is one line now, in
the conversation of the mail read, and never answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channels.email.parsing import parse_message
from tests.channels.email.conftest import USER, PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    FRIEND,
    OWNER,
    Stack,
    drain,
    good_auth,
    open_with_friend,
    owner_mail,
    user_turns,
    wait_ref,
)

# As Outlook sends it (Exchange adds no Auto-Submitted), the mail read named only in
# the report part.
OUTLOOK_BODY = (
    "Your message\r\n\r\n  To: My Assistant\r\n  Subject: Re: Trip\r\n\r\n"
    "was read on Tuesday, January 14, 2025 10:00 AM (UTC+01:00).\r\n"
)
NOTIFICATION = (
    "Reporting-UA: owner-pc; Microsoft Outlook 16.0\r\n"
    "Final-Recipient: rfc822;{reader}\r\n"
    "Original-Message-ID: {original}\r\n"
    "Disposition: manual-action/MDN-sent-manually; {disposition}\r\n"
)


def receipt(
    n: int,
    original: str,
    *,
    sender: str = OWNER,
    subject: str = "Read: Re: Trip",
    disposition: str = "displayed",
    wrapped: bool = False,
) -> bytes:
    """A read receipt from ``sender`` for our mail ``original`` (Message-ID); ``wrapped``:
    inside a multipart/mixed with a disclaimer, as a company gateway sends it on."""
    domain = sender.rsplit("@", 1)[1]
    boundary, outer = "mdn-part", "gateway-part"
    report = (
        f"Content-Type: multipart/report; report-type=disposition-notification; "
        f'boundary="{boundary}"\r\n\r\n'
        f"--{boundary}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{OUTLOOK_BODY}\r\n"
        f"--{boundary}\r\nContent-Type: message/disposition-notification\r\n\r\n"
        + NOTIFICATION.format(reader=sender, original=original, disposition=disposition)
        + f"\r\n--{boundary}--\r\n"
    )
    if wrapped:
        report = (
            f'Content-Type: multipart/mixed; boundary="{outer}"\r\n\r\n--{outer}\r\n'
            + report
            + f"\r\n--{outer}\r\nContent-Type: text/plain\r\n\r\n"
            "This e-mail is confidential.\r\n"
            f"--{outer}--\r\n"
        )
    head = (
        f"From: Someone <{sender}>\r\nTo: My Assistant <{USER}>\r\nSubject: {subject}\r\n"
        f"Date: Tue, 14 Jan 2025 10:00:00 +0100\r\nMessage-ID: <mdn-{n}@{domain}>\r\n"
        f"Authentication-Results: {good_auth(domain)}\r\nMIME-Version: 1.0\r\n"
    )
    return (head + report).encode()


# As Thunderbird sends it: its own subject, a named report part, the headers returned.
THUNDERBIRD = (
    b"From: Owner <owner@example.org>\r\nTo: bot@example.com\r\n"
    b"Subject: Return Receipt (displayed) - Trip\r\nMessage-ID: <tb-1@example.org>\r\n"
    b"Date: Tue, 14 Jan 2025 10:05:00 +0100\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/report; report-type=disposition-notification;\r\n"
    b'\tboundary="tb"\r\n\r\n--tb\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\n'
    b"This is a Return Receipt for the mail that you sent to owner@example.org.\r\n\r\n"
    b'--tb\r\nContent-Type: message/disposition-notification; name="MDNPart2.txt"\r\n'
    b"Content-Disposition: inline\r\n\r\nReporting-UA: pc; Mozilla Thunderbird\r\n"
    b"Final-Recipient: rfc822;owner@example.org\r\n"
    b"Original-Message-ID: <ours-1@example.com>\r\n"
    b"Disposition: manual-action/MDN-sent-manually; displayed\r\n\r\n"
    b'--tb\r\nContent-Type: text/rfc822-headers; name="MDNPart3.txt"\r\n\r\n'
    b"Subject: Trip\r\nMessage-ID: <ours-1@example.com>\r\n\r\n--tb--\r\n"
)


def test_a_read_receipt_is_read() -> None:
    outlook = parse_message(receipt(1, "<ours-1@example.com>"))
    assert outlook.auto_submitted
    assert outlook.receipt is not None
    assert outlook.receipt.original_id == "<ours-1@example.com>"
    assert outlook.receipt.summary(OWNER) == (
        f'Read receipt: {OWNER} read "Re: Trip" (Tue, 14 Jan 2025 10:00:00 +0100).'
    )
    thunderbird = parse_message(THUNDERBIRD)
    assert thunderbird.receipt is not None
    assert thunderbird.receipt.summary(OWNER) == (
        f'Read receipt: {OWNER} read "Trip" (Tue, 14 Jan 2025 10:05:00 +0100).'
    )
    deleted = parse_message(receipt(2, "<x@y>", subject="Not read: Trip", disposition="deleted"))
    assert deleted.receipt is not None
    assert 'deleted without reading "Trip"' in deleted.receipt.summary(OWNER)
    # a client that keeps the subject as it was: nothing of it taken for a prefix
    lunch = parse_message(receipt(4, "<x@y>", subject="Lunch"))
    assert lunch.receipt is not None and lunch.receipt.original_subject == "Lunch"
    named = parse_message(receipt(5, "<x@y>", subject="Read receipt: Lunch"))
    assert named.receipt is not None and named.receipt.original_subject == "Lunch"
    wrapped = parse_message(receipt(3, "<ours-1@example.com>", wrapped=True))
    assert wrapped.auto_submitted and wrapped.receipt is not None


def test_a_receipt_forwarded_as_an_attachment_is_the_owner_s_question() -> None:
    msg = owner_mail(9, "Did Ann really read this?", subject="Fwd: Read: Trip")
    msg.add_attachment(receipt(1, "<ours-1@example.com>", sender=FRIEND), "message", "rfc822")
    parsed = parse_message(msg.as_bytes())
    assert parsed.receipt is None and not parsed.auto_submitted


async def test_read_receipts_are_recorded_in_their_thread_and_never_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_with_friend(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Plan the trip.", subject="Trip"))
    await append(pymap.port, folder, owner_mail(2, "Dinner?", subject="Dinner", sender=FRIEND))
    await smtp.capture.wait_for(2)
    [to_owner] = [m for _, m in smtp.capture.messages if m["To"] == OWNER]
    [to_friend] = [m for _, m in smtp.capture.messages if m["To"] == FRIEND]
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    # The owner's Outlook, a gateway's wrapped copy of it, the known contact's client.
    await append(pymap.port, folder, receipt(3, to_owner["Message-ID"]))
    await append(pymap.port, folder, receipt(4, to_owner["Message-ID"], wrapped=True))
    friend = receipt(5, to_friend["Message-ID"], sender=FRIEND, subject="Read: Re: Dinner")
    await append(pymap.port, folder, friend)
    assert await wait_ref(stack, f"<mdn-3@{OWNER.split('@')[1]}>") == conv
    assert await wait_ref(stack, f"<mdn-4@{OWNER.split('@')[1]}>") == conv
    async with asyncio.timeout(30):
        while True:
            [party] = await stack.services.external.list_parties()
            said = [str(m["content"]) for m in await stack.services.external.messages(party.id)]
            if any(s.startswith("Read receipt:") for s in said):
                break
            await asyncio.sleep(0.05)
    assert said[-1] == (
        f'Read receipt: {FRIEND} read "Re: Dinner" (Tue, 14 Jan 2025 10:00:00 +0100).'
    )
    line = f'Read receipt: {OWNER} read "Re: Trip" (Tue, 14 Jan 2025 10:00:00 +0100).'
    assert user_turns(stack, conv)[1:] == [line, line]
    turns = [t for t in stack.services.store.read_lines(conv) if t.get("type") == "turn"]
    assert [t.get("awaitReply") for t in turns if t["content"] == line] == [False, False]
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    # Nobody was answered (the friend's receipt is escalated to the owner, threaded
    # under nothing; no model reply to anyone, no acknowledgement).
    assert [m["To"] for _, m in smtp.capture.messages].count(FRIEND) == 1
    owner_mails = [m for _, m in smtp.capture.messages if m["To"] == OWNER]
    assert [m["In-Reply-To"] for m in owner_mails if m["In-Reply-To"]] == ["<e2e-1@example.org>"]
    # no conversation of a receipt's own (the other one is the escalations')
    convs = await stack.services.conversations.list(channel="email")
    assert [c.id for c in convs if c.identity_key.startswith("email-thread:")] == [conv]
