"""End to end, one thread as the owner's real mail clients write it: Gmail's long ids
and References chain, Outlook's reply with Thread-Index and no References, Apple Mail
answering an old message of the thread, a phone client keeping only In-Reply-To under
"Re: Re: AW: Fwd:", and a long thread's References. Every mail lands in the one
conversation, and every answer names, as written on the wire, the ids its client
threads it by (long ids used to go out as RFC 2047 encoded words, matching nothing)."""

from __future__ import annotations

import base64
from email import message_from_bytes
from email.message import Message
from email.policy import SMTP, compat32
from pathlib import Path
from typing import Any

from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import Stack, open_in_new_folder, owner_mail, wait_ref

GMAIL_1 = "<CAH+w=7Y0b5x3kq9Qx6dJ_4vZ8s9Lq9eW8R=qz-XyH2L3mN4oP5q6r7s8t9@mail.gmail.com>"
GMAIL_2 = "<CAH+w=7Y1c6y4lr0Ry7eK_5wA9t0Mr0fX9S=ra-YzI3M4nO5pQ6r7s8t9u0@mail.gmail.com>"
OUTLOOK = "<DM6PR12MB41234567C2F9A8B7E6D5C4B3A2F1E0D9@DM6PR12MB4123456.namprd12.prod.outlook.com>"
APPLE = "<6F1C2E3A-8B9D-4E5F-A0B1-C2D3E4F5A6B7@example.org>"
PHONE = "<1732712345.8d7f6e5d4c3b2a19@mobile.example.org>"
LONG = "<CAH+w=7Y9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9z9@mail.gmail.com>"


def client_mail(
    message_id: str,
    body: str,
    subject: str,
    in_reply_to: str | None = None,
    references: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """The owner's mail with a client's own Message-ID and headers, as it sends it."""
    msg = owner_mail(0, body, subject, in_reply_to=in_reply_to)
    msg.replace_header("Message-ID", message_id)
    if references:
        msg["References"] = " ".join(references)
    for name, value in (headers or {}).items():
        msg[name] = value
    # Clients fold between ids (the email package would write a long one encoded).
    raw = msg.as_bytes(policy=SMTP.clone(max_line_length=None))
    head, _, body_bytes = raw.partition(b"\r\n\r\n")
    return head.replace(b"> <", b">\r\n <") + b"\r\n\r\n" + body_bytes


def on_the_wire(smtp: SmtpServer, index: int) -> Message:
    """Our ``index``-th mail as sent, its headers undecoded: what a client threads by."""
    envelope, _ = smtp.capture.messages[index]
    return message_from_bytes(envelope.original_content or b"", policy=compat32)


class OwnerClients:
    """The owner writing to the assistant from one client after another."""

    def __init__(self, pymap: PymapServer, smtp: SmtpServer, stack: Stack, folder: str) -> None:
        self.pymap, self.smtp, self.stack, self.folder = pymap, smtp, stack, folder
        self.answers = 0

    async def write(self, message_id: str, *args: Any, **kwargs: Any) -> tuple[str, str, Any]:
        """Send :func:`client_mail` and wait for the answer: its Message-ID, In-Reply-To
        and References as sent, and the conversation the mail joined."""
        await append(self.pymap.port, self.folder, client_mail(message_id, *args, **kwargs))
        self.answers += 1
        await self.smtp.capture.wait_for(self.answers)
        sent = on_the_wire(self.smtp, self.answers - 1)
        refs = sent["References"].split()
        conv = await wait_ref(self.stack, message_id)
        return sent["Message-ID"], " ".join(sent["In-Reply-To"].split()), (refs, conv)


async def test_one_thread_through_real_clients_is_one_conversation_threaded_on_the_wire(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    owner = OwnerClients(pymap, smtp, stack, folder)
    # Gmail, a new mail: an id too long for one line after "In-Reply-To: ".
    r1, in_reply_to, (refs, conv) = await owner.write(GMAIL_1, "Plan a trip to Lisbon.", "Trip")
    assert (in_reply_to, refs) == (GMAIL_1, [GMAIL_1])
    # Gmail's reply: the whole chain, In-Reply-To our answer.
    r2, in_reply_to, found = await owner.write(
        GMAIL_2, "Two nights.", "Re: Trip", r1, [GMAIL_1, r1]
    )
    assert (in_reply_to, found) == (GMAIL_2, ([GMAIL_1, r1, GMAIL_2], conv))
    # Outlook desktop: In-Reply-To, no References, a Thread-Index of its own.
    index = base64.b64encode(bytes(range(1, 23))).decode()
    outlook = {"Thread-Topic": "Trip", "Thread-Index": index}
    r3, in_reply_to, found = await owner.write(
        OUTLOOK, "Make it Porto.", "RE: Trip", r2, headers=outlook
    )
    assert (in_reply_to, found) == (OUTLOOK, ([r2, OUTLOOK], conv))
    assert on_the_wire(smtp, 2)["Subject"] == "Re: Trip"
    # Apple Mail answering our first answer, not the newest.
    _, in_reply_to, found = await owner.write(
        APPLE, "Back to Lisbon, sorry.", "Re: Trip", r1, [GMAIL_1, r1]
    )
    assert (in_reply_to, found) == (APPLE, ([GMAIL_1, r1, APPLE], conv))
    # A phone client: In-Reply-To only, prefixes piled up by three clients.
    r5, in_reply_to, found = await owner.write(
        PHONE, "Window seat please.", "Re: Re: AW: Fwd: Trip", r3
    )
    assert (in_reply_to, found) == (PHONE, ([r3, PHONE], conv))
    assert on_the_wire(smtp, 4)["Subject"] == "Re: Fwd: Trip"
    # A long thread (ids of mails we never saw in the middle), the subject changed:
    # References keep the root and the newest ids (RFC 5322 section 3.6.4's advice).
    middle = [f"<mid-{n}@mail.gmail.com>" for n in range(30)]
    _, in_reply_to, found = await owner.write(
        LONG, "Hotel?", "Porto after all (was: Trip)", r5, [GMAIL_1, *middle, r5]
    )
    assert (in_reply_to, found) == (LONG, ([GMAIL_1, *middle[-17:], r5, LONG], conv))
    for n in range(6):  # nothing written as encoded words
        sent = on_the_wire(smtp, n)
        assert "=?" not in sent["In-Reply-To"] + sent["References"]
