"""End to end, the subject of the mail we send: a mail without a subject is answered
under one a client can show, and the threading headers are those of any answer."""

from __future__ import annotations

from pathlib import Path

from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import Stack, open_in_new_folder, owner_mail, user_turns, wait_ref


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
