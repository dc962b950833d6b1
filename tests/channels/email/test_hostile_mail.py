"""Mail a hostile or broken world sends, through real pymap with the real IMAP client."""

from __future__ import annotations

from pathlib import Path

from channels.email.adapter import EmailChannel
from tests.channels.email.conftest import (
    FakeHost,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
)
from tests.channels.email.test_adapter import mail, make_config, start


async def test_attached_and_threaded_forwards_are_read_as_new_topics(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    # Outlook's "Forward as Attachment": only the attachment's name reached the core.
    inner = mail(90, sender="bob@example.net", subject="Lunch", body="Lunch at noon on Saturday?")
    outer = mail(1, subject="FW: Lunch", body="Can you put this in my calendar?")
    outer.add_attachment(inner)
    # A client that keeps a forward in its conversation gives it the In-Reply-To and
    # References of the mail forwarded: "Fwd: Invoice" joined that mail's conversation.
    threaded = mail(
        2,
        subject="Fwd: Invoice 42",
        body="---------- Forwarded message ---------\nFrom: Shop <s@example.net>\n\nPay 42.",
        headers={"In-Reply-To": "<ours7@example.com>", "References": "<ours7@example.com>"},
    )
    reply = mail(3, subject="AW: Invoice 42", headers={"In-Reply-To": "<ours8@example.com>"})
    for message in (outer, threaded, reply):
        await append(pymap.port, folder, message)
    host = FakeHost()
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    first, second, third = await host.wait_for(3)
    assert first.text.startswith(
        "Subject: FW: Lunch\n\nCan you put this in my calendar?\n\n"
        "---------- Forwarded message ---------\nFrom: Owner <bob@example.net>\n"
    )
    assert "Lunch at noon on Saturday?" in first.text
    assert first.text.splitlines()[-1].startswith("[attached mail: Lunch.eml, ")
    assert first.thread_refs == ()
    assert second.thread_refs == () and "Pay 42." in second.text
    assert third.thread_refs == ("<ours8@example.com>",)  # a reply keeps its thread
