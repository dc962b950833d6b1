"""End to end, the subject of the mail we send: a mail without a subject is answered
under one a client can show, and the threading headers are those of any answer."""

from __future__ import annotations

from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import pytest

from bot.mail_subjects import MAX_SUBJECT, capped_subject, reply_subject
from channels.email.id_folding import MAIL_POLICY
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    OWNER,
    Stack,
    open_in_new_folder,
    owner_mail,
    user_turns,
    wait_ref,
)


def wire(mail: EmailMessage) -> bytes:
    """``mail`` as our own mail is written (:data:`MAIL_POLICY`)."""
    return mail.as_bytes(policy=MAIL_POLICY)


async def test_a_mail_without_a_subject_is_answered_re_no_subject(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 41): the answer's subject was "Re:" alone, an empty subject
    # in every mail client's list.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Find me a train to Lisbon.", subject=""))
    [reply] = await smtp.capture.wait_for(1)
    assert reply["Subject"] == "Re: (no subject)"
    assert reply["In-Reply-To"] == "<e2e-1@example.org>"
    assert reply["References"] == "<e2e-1@example.org>"
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    # The owner answers it from a client that keeps the subject: the same thread, no
    # "Subject:" line (it says nothing), and the next answer is "Re: (no subject)" once.
    await append(
        pymap.port,
        folder,
        owner_mail(
            2,
            "Make it first class.",
            subject="RE: Re: (No Subject)",
            in_reply_to=reply["Message-ID"],
            references=f"<e2e-1@example.org> {reply['Message-ID']}",
        ),
    )
    second = (await smtp.capture.wait_for(2))[1]
    assert second["Subject"] == "Re: (no subject)"
    assert second["In-Reply-To"] == "<e2e-2@example.org>"
    assert second["References"] == f"<e2e-1@example.org> {reply['Message-ID']} <e2e-2@example.org>"
    assert await wait_ref(stack, "<e2e-2@example.org>") == conv
    assert user_turns(stack, conv) == ["Find me a train to Lisbon.", "Make it first class."]


async def test_a_long_subject_is_answered_cut_and_still_threads(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 41): a 5,000-character subject came back whole in "Re: ...",
    # and filled the escalation's quote of a stranger's mail, its words never shown.
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    subject = " ".join(f"Überweisung{n}" for n in range(400))
    assert len(subject) > 5000
    # (written as our mail is: the email package's own folding loses spaces, below)
    await append(pymap.port, folder, wire(owner_mail(1, "Is this spam?", subject=subject)))
    [reply] = await smtp.capture.wait_for(1)
    assert reply["Subject"] == reply_subject(subject)
    assert len(reply["Subject"]) <= MAX_SUBJECT and reply["Subject"].endswith("Überweisung13…")
    assert reply["In-Reply-To"] == "<e2e-1@example.org>"
    conv = await wait_ref(stack, "<e2e-1@example.org>")
    # The owner's answer carries the cut subject: one thread, no "Subject:" line; and
    # so does one from a phone that dropped its references (the subject rule).
    answers = [
        owner_mail(
            2, "Delete it.", subject=f"Re: {reply['Subject']}", in_reply_to=reply["Message-ID"]
        ),
        owner_mail(3, "And block them.", subject=f"RE: {reply['Subject']}"),
    ]
    for answer in answers:
        await append(pymap.port, folder, wire(answer))
    replies = await smtp.capture.wait_for(3)
    assert [r["Subject"] for r in replies[1:]] == [reply["Subject"]] * 2
    assert await wait_ref(stack, "<e2e-3@example.org>") == conv
    assert user_turns(stack, conv) == [
        f"Subject: {capped_subject(subject)}\n\nIs this spam?",
        "Delete it.",
        "And block them.",
    ]
    # A stranger's mail: the escalation shows their words below the subject.
    stranger = owner_mail(4, "Please call me back about the invoice.", subject=subject,
                          sender="eve@stranger.example")  # fmt: skip
    await append(pymap.port, folder, wire(stranger))
    escalation = (await smtp.capture.wait_for(4))[3]
    assert escalation["To"] == OWNER
    assert "Please call me back about the invoice." in text_of(escalation)
    assert subject not in text_of(escalation)


@pytest.mark.parametrize(
    "subject",
    [
        reply_subject(" ".join(f"Überweisung{n}" for n in range(400))),
        capped_subject("Überweisung bestätigt 確認 " * 400),
        "Re: Grüße aus München, wir sehen uns am Freitag beim Konzert in der Philharmonie",
    ],
)
def test_a_long_non_ascii_subject_keeps_its_spaces_on_the_wire(subject: str) -> None:
    # Regression (session 41): the email package folds a long non-ASCII subject into
    # encoded words with a space between two of them, which RFC 2047 says is no part of
    # the text: "Überweisung9Überweisung10" in every client.
    mail = EmailMessage()
    mail["Subject"] = subject
    mail["Thread-Topic"] = subject
    mail.set_content("x")
    raw = wire(mail)
    assert raw.isascii() and all(len(line) <= 76 for line in raw.split(b"\r\n"))
    parsed = message_from_bytes(raw, policy=policy.default)
    assert parsed["Subject"] == parsed["Thread-Topic"] == subject
