"""Mail a hostile or broken world sends, through real pymap with the real IMAP client:
stored, labelled where it cannot be read, the cursor moving on, the event loop free."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path

import aioimaplib
import pytest

from bot.events import OutboundMessage
from channels.email import memory
from channels.email.adapter import EmailChannel
from channels.email.parsing import ParsedMail, parse_message
from tests.channels.email.conftest import (
    PASSWORD,
    USER,
    FakeHost,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    folder_state,
)
from tests.channels.email.helpers import mail_id
from tests.channels.email.test_adapter import OWNER, mail, make_config, start
from tests.channels.email.test_parsing import _nested


async def _append_big(port: int, folder: str, raw: bytes) -> None:
    """APPEND with room for a big mail on a busy machine (the helper allows 5 s)."""
    client = aioimaplib.IMAP4("127.0.0.1", port, timeout=120)
    await client.wait_hello_from_server()
    assert (await client.login(USER, PASSWORD)).result == "OK"
    try:
        response = await client.append(raw, mailbox=folder)
        assert response.result == "OK", response
    finally:
        await client.logout()


def _with_big_attachment(n: int, size: int) -> bytes:
    data = base64.encodebytes(os.urandom(size)).replace(b"\n", b"\r\n")
    return (
        f"From: Owner <{OWNER}>\r\nTo: bot@example.com\r\nSubject: Scans\r\n"
        f"Message-ID: <m{n}@example.org>\r\nMIME-Version: 1.0\r\n".encode()
        + b'Content-Type: multipart/mixed; boundary="B"\r\n\r\n'
        b"--B\r\nContent-Type: text/plain\r\n\r\nThe scans.\r\n"
        b"--B\r\nContent-Type: application/pdf; name=scans.pdf\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + data + b"\r\n--B--\r\n"
    )


async def test_big_and_deep_mail_is_stored_without_holding_up_the_event_loop(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # Parsing ran on the event loop: a forward of a forward ... 150 deep held it for
    # over a second, a 25 MB mail for more (seconds on a busy machine), and Telegram,
    # the dashboard and every reply stood still meanwhile.
    folder = await create_folder(pymap.port)
    deep = _nested(150).replace(b"<x@example.org>", b"<m1@example.org>")
    await _append_big(pymap.port, folder, deep)
    big = _with_big_attachment(2, 25 * 1024 * 1024)
    await _append_big(pymap.port, folder, big)
    # What parsing it costs on this machine now (a busy machine is slower at both)
    started = time.perf_counter()
    parse_message(big)
    parsing = time.perf_counter() - started
    await append(pymap.port, folder, mail(3))
    host = FakeHost()
    stalls: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            stalls.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        channel = EmailChannel(make_config(tmp_path, pymap.port, smtp.port, folder))
        channels.append(channel)
        await channel.start(host)  # (the first sync outlasts start's wait: it goes on)
        first, second, third = await host.wait_for(3, timeout=120)
    finally:
        ticking.cancel()
    assert [mail_id(m.message_id) for m in (first, second, third)] == [
        "<m1@example.org>",
        "<m2@example.org>",
        "<m3@example.org>",
    ]
    assert "see attached" in first.text
    assert second.text == "Subject: Scans\n\nThe scans.\n\n[attachment: scans.pdf, 25.0 MB]"
    state = await folder_state(pymap.port, folder)
    await host.wait_cursor(f"{folder}:last_uid", lambda v: v == str(max(state)))
    # On the event loop, the loop stood still for the whole parse (longer: the mail's
    # key and quote stripping too); in a thread, for moments of contention.
    assert max(stalls) < parsing / 2, f"the loop stood still {max(stalls):.1f} s ({parsing:.1f})"


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


async def test_a_sender_answering_every_mail_of_ours_is_taken_for_a_loop(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two assistants (or an assistant and a bot that marks nothing) answering each
    # other: every mail carried no sign of being automatic, and it went on for ever.
    monkeypatch.setattr(memory, "LOOP_ANSWERS", 3)
    monkeypatch.setattr(memory, "LOOP_ANSWERS_OWNER", 3)  # the mails come from the owner
    folder = await create_folder(pymap.port)
    host = FakeHost()
    channel = await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    seen: list[bool] = []
    previous = None
    for n in range(1, 6):
        sent = await channel.send(
            OutboundMessage(
                channel="email",
                chat_id=OWNER,
                text=f"Answer {n}.",
                in_reply_to=previous,
                conversation_id="c1",
            )
        )
        await append(
            pymap.port,
            folder,
            mail(n, subject="Re: Hello", headers={"In-Reply-To": str(sent.message_ref)}),
        )
        [*_, got] = await host.wait_for(n)
        previous = got.message_ref
        seen.append(got.addressed)
    assert seen == [True, True, True, False, False]  # the 4th answer within the hour on
    assert channel.problems() == [
        f"mail from {OWNER} answered ours over 3 times within an hour: "
        "taken for a mail loop, 2 not answered"
    ]
    # a mail of theirs that answers none of ours is theirs, answered
    await append(pymap.port, folder, mail(6, subject="Something new"))
    [*_, new] = await host.wait_for(6)
    assert new.addressed


def test_the_owners_quick_answers_are_not_taken_for_a_loop() -> None:
    # A quick back-and-forth by mail with the owner passed 30 answers an hour, and every
    # later mail of the owner's was recorded and not answered.
    book = memory.Correspondence(owner=["Owner@Example.org"])
    book.sent("<ours@example.com>", "Re: Plans")

    def answer(sender: str) -> ParsedMail:
        return parse_message(
            f"From: {sender}\r\nSubject: Re: Plans\r\n"
            "In-Reply-To: <ours@example.com>\r\n\r\nx".encode()
        )

    owner, other = answer("owner@example.org"), answer("a@example.org")
    ticks = [float(t) for t in range(memory.LOOP_ANSWERS + 10)]
    assert not any(book.looping(owner, now=t) for t in ticks)
    assert any(book.looping(other, now=t) for t in ticks)
    assert book.loop_answers("owner@example.org") == memory.LOOP_ANSWERS_OWNER
    more = [float(t) for t in range(memory.LOOP_ANSWERS_OWNER)]
    assert any(book.looping(owner, now=100.0 + t) for t in more)  # a machine, all the same


def test_the_loop_window_forgets() -> None:
    book = memory.Correspondence()
    book.sent("<ours@example.com>", "Re: Hello")
    answer = parse_message(
        b"From: a@example.org\r\nSubject: Re: Hello\r\nIn-Reply-To: <ours@example.com>\r\n\r\nx"
    )
    assert not any(book.looping(answer, now=float(t)) for t in range(memory.LOOP_ANSWERS))
    assert book.looping(answer, now=100.0) and book.problems(now=100.0)
    # an auto-responder's subject on an answer to ours, whatever follows it
    away = parse_message(
        b"From: b@example.org\r\nSubject: Automatic reply: Message from My Assistant\r\n"
        b"In-Reply-To: <ours@example.com>\r\n\r\nAway."
    )
    assert not away.auto_submitted and book.looping(away, now=0.0)
    # an hour later, the count starts afresh and the status line is gone
    later = 100.0 + memory.LOOP_WINDOW + 1
    assert book.problems(now=later) == []
    assert not book.looping(answer, now=later)
