"""SmtpSender against a real aiosmtpd server: which recipients a server without SMTPUTF8
can still be sent to, and what is given up on."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from email.policy import SMTPUTF8
from pathlib import Path

import pytest
from aiosmtpd.smtp import SMTP

from bot.channel import Misconfigured, PermanentSendError, Unreachable
from bot.events import OutboundMessage
from channels.email.adapter import EmailChannel
from tests.channels.email.conftest import (
    USER,
    Capture,
    PymapServer,
    SmtpServer,
    _authenticator,
    append,
    create_folder,
)
from tests.channels.email.helpers import text_of
from tests.channels.email.test_adapter import OWNER, make_config


async def test_reply_all_reaches_everyone_a_server_without_smtputf8_can_address(
    smtp: SmtpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: one Cc'd jöhn@example.de on a server without SMTPUTF8 (aiosmtpd's
    # default) made the whole reply a PermanentSendError: the owner and every other
    # recipient lost it too. An accented domain has an ASCII form (IDNA) and is kept.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    caplog.set_level(logging.WARNING, logger="my_agent.email")
    await channel.send(
        OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Friday at 8 it is.",
            in_reply_to="<m1@example.org>",
            subject="Dinner",
            metadata={
                "to": [USER, "jöhn@example.de"],
                "cc": ["jöhn@example.de", "anna@example.org", "ben@bücher.example"],
            },
        )
    )
    [sent] = await smtp.capture.wait_for(1)
    envelope, _ = smtp.capture.messages[0]
    assert envelope.rcpt_tos == [OWNER, "anna@example.org", "ben@xn--bcher-kva.example"]
    assert sent["To"] == OWNER  # the header names who got it, nobody it never reached
    assert sent["Cc"] == "anna@example.org, ben@xn--bcher-kva.example"
    assert "Friday at 8 it is." in text_of(sent)
    [warning] = [r for r in caplog.records if "jöhn@example.de" in r.getMessage()]
    assert warning.levelno == logging.WARNING and "SMTPUTF8" in warning.getMessage()


async def test_no_addressable_recipient_is_still_a_permanent_failure(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # The sender alone, unaddressable, and its Cc too: nothing can go out, every retry
    # would fail alike and hold up the outbox behind it.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    with pytest.raises(PermanentSendError, match=r"jöhn@example\.de"):
        await channel.send(
            OutboundMessage(
                channel="email",
                chat_id="jöhn@example.de",
                text="x",
                in_reply_to="<m1@example.org>",
                metadata={"to": [USER], "cc": ["zoë@example.de"]},
            )
        )
    assert smtp.capture.messages == []


async def test_an_accented_domain_alone_goes_out_in_its_ascii_form(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # Nobody is left out, so nothing is lost: the mail is sent, not retried forever.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    await channel.send(OutboundMessage(channel="email", chat_id="ben@bücher.example", text="x"))
    [sent] = await smtp.capture.wait_for(1)
    assert sent["To"] == "ben@xn--bcher-kva.example"


async def test_the_owner_is_told_of_a_cc_the_reply_all_left_out(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path
) -> None:
    # Regression: the reply-all reached the others, but that jöhn@example.de never got
    # it was only logged: the owner believed everyone on the thread had the answer.
    from tests.channels.email.stack import close_stack, e2e_config, open_stack, owner_mail

    folder = await create_folder(pymap.port)
    config = e2e_config(tmp_path, pymap.port, smtp.port, folder)
    config.channels.email.reply_all = True
    stack = await open_stack(config)
    try:
        for n in (1, 2):  # the second reply to the thread: told once, not per reply
            mail = owner_mail(n, f"Dinner on Friday, part {n}?", subject="Dinner")
            mail["Cc"] = "jöhn@example.de, anna@example.org"
            # as an MTA with SMTPUTF8 delivers it: the address in UTF-8, not RFC 2047
            await append(pymap.port, folder, mail.as_bytes(policy=SMTPUTF8))
            await smtp.capture.wait_for(n + 1)
        await asyncio.sleep(0.3)  # an alert for the second reply would have come by now
        sent = await smtp.capture.wait_for(3)
    finally:
        await close_stack(stack)
    assert len(sent) == 3, [m["Subject"] for m in sent]
    reply, alert, second = sent
    assert reply["Subject"] == second["Subject"] == "Re: Dinner"
    assert reply["Cc"] == "anna@example.org"
    assert alert["To"] == OWNER and alert["Subject"] == "my-agent alert"
    body = text_of(alert)
    assert "without jöhn@example.de" in body and "SMTPUTF8" in body, body
    assert "anna@example.org" not in body


def reply_all(text: str, cc: list[str]) -> OutboundMessage:
    return OutboundMessage(
        channel="email",
        chat_id=OWNER,
        text=text,
        in_reply_to="<m1@example.org>",
        subject="Dinner",
        metadata={"to": [USER], "cc": cc},
        send_key="email:<m1@example.org>:reply",
    )


async def test_a_recipient_refused_for_now_gets_the_retry_and_nobody_else(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # Regression: a Cc the server refused with 451 while it took the others was only
    # logged: the mail counted as sent, never retried to them, and nobody told.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    smtp.capture.reject_rcpt["busy@example.org"] = "451 4.3.0 Try again later"
    message = reply_all("Friday at 8.", ["anna@example.org", "busy@example.org"])
    with pytest.raises(Exception, match=r"busy@example\.org") as info:
        await channel.send(message)  # the outbox retries it later
    assert not isinstance(info.value, PermanentSendError)
    [first] = await smtp.capture.wait_for(1)
    assert smtp.capture.messages[0][0].rcpt_tos == [OWNER, "anna@example.org"]
    del smtp.capture.reject_rcpt["busy@example.org"]
    result = await channel.send(message)  # the outbox's retry: to the one left
    [_, again] = await smtp.capture.wait_for(2)
    assert smtp.capture.messages[1][0].rcpt_tos == ["busy@example.org"]
    assert again["Message-ID"] == first["Message-ID"] == result.message_ref
    assert again["Cc"] == first["Cc"]  # the same mail: its headers name everyone
    assert result.left_out == ()


async def test_a_recipient_refused_for_good_is_left_out_and_the_owner_told(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # Regression: a Cc the server refused with 550 while it took the others was only
    # logged: the owner believed everyone on the thread had the answer. Refused for
    # now at first and for good at the retry, it is left out as well (the others have
    # the mail: it is not failed as a whole).
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    smtp.capture.reject_rcpt["gone@example.org"] = "550 5.1.1 No such user"
    smtp.capture.reject_rcpt["busy@example.org"] = "451 4.3.0 Try again later"
    message = reply_all("Friday at 8.", ["gone@example.org", "busy@example.org"])
    with pytest.raises(Exception, match=r"busy@example\.org"):
        await channel.send(message)
    smtp.capture.reject_rcpt["busy@example.org"] = "550 5.2.1 Mailbox disabled"
    result = await channel.send(message)
    assert [e.rcpt_tos for e, _ in smtp.capture.messages] == [[OWNER]]
    assert result.left_out == ("gone@example.org", "busy@example.org")
    assert "550 5.1.1 No such user" in result.left_out_reason
    assert "Mailbox disabled" in result.left_out_reason


@pytest.fixture
async def utf8_smtp() -> AsyncIterator[tuple[Capture, int]]:
    """An SMTP server offering SMTPUTF8 (RFC 6531)."""
    capture = Capture()
    server = await asyncio.get_running_loop().create_server(
        lambda: SMTP(
            capture,
            hostname="localhost",
            authenticator=_authenticator,
            auth_require_tls=False,
            enable_SMTPUTF8=True,
        ),
        "127.0.0.1",
        0,
    )
    yield capture, int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


UTF8_ID = "<réponse-ü1@exämple.org>"  # RFC 6532 allows UTF-8 in a Message-ID


def _reply_to_utf8_id() -> OutboundMessage:
    return OutboundMessage(
        channel="email",
        chat_id=OWNER,
        text="Noted.",
        in_reply_to=UTF8_ID,
        subject="Dinner",
        metadata={"references": ["<root@example.org>"]},
    )


async def test_a_utf8_message_id_is_answered_as_it_is_with_smtputf8(
    utf8_smtp: tuple[Capture, int], tmp_path: Path
) -> None:
    # Regression: the reply's In-Reply-To/References came out as RFC 2047 encoded words
    # ("=?utf-8?q?...?="), which match no Message-ID: no client threaded the reply.
    capture, port = utf8_smtp
    await EmailChannel(make_config(tmp_path, 1, port, "INBOX")).send(_reply_to_utf8_id())
    [sent] = await capture.wait_for(1)
    envelope, _ = capture.messages[0]
    raw = envelope.original_content or b""
    assert b"=?" not in raw
    assert "SMTPUTF8" in envelope.mail_options
    assert sent["In-Reply-To"] == UTF8_ID
    assert UTF8_ID in sent["References"].split()


async def test_a_utf8_message_id_is_left_out_for_a_server_without_smtputf8(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # Encoded words thread nothing and raw UTF-8 needs SMTPUTF8: the id is left out,
    # the reply still goes (the rest of References and the subject thread it).
    await EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX")).send(_reply_to_utf8_id())
    [sent] = await smtp.capture.wait_for(1)
    raw = smtp.capture.messages[0][0].original_content or b""
    assert b"=?" not in raw
    assert sent["In-Reply-To"] is None
    assert UTF8_ID not in (sent["References"] or "")


async def test_a_login_the_server_refuses_is_misconfigured(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # A wrong password (535) was retried like an outage: the owner heard of it only when
    # the reply failed for good, after 50 attempts. Misconfigured: still retried (the
    # owner fixes the password and the replies go), the owner told at the third.
    config = make_config(tmp_path, 1, smtp.port, "INBOX", password="not-the-password")
    with pytest.raises(Misconfigured, match=r"refused the login \(535.*EMAIL_PASSWORD"):
        await EmailChannel(config).send(_reply_to_utf8_id())
    assert smtp.capture.messages == []


async def test_a_sender_address_the_server_refuses_is_misconfigured(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # "553 Sender address rejected: not owned by user" (the login may not send as
    # channels.email.address) fails every mail alike: it was retried like an outage, and
    # the owner heard of it only when the outbox gave up, some 50 attempts later.
    config = make_config(tmp_path, 1, smtp.port, "INBOX")
    channel = EmailChannel(config)
    smtp.capture.reject_mail = "553 5.7.1 Sender address rejected: not owned by user"
    with pytest.raises(Misconfigured, match=r"553 .*not owned by user.*channels\.email\.address"):
        await channel.send(_reply_to_utf8_id())
    # refused for now: an outage, retried as it is
    smtp.capture.reject_mail = "451 4.3.0 Try again later"
    with pytest.raises(Exception) as info:
        await channel.send(_reply_to_utf8_id())
    assert not isinstance(info.value, Misconfigured | PermanentSendError)
    smtp.capture.reject_mail = None
    await channel.send(_reply_to_utf8_id())
    assert len(await smtp.capture.wait_for(1)) == 1


async def test_a_server_that_cannot_be_reached_is_an_outage_held_by_the_outbox(
    tmp_path: Path,
) -> None:
    # Regression: a refused connection counted toward the outbox's 50 attempts like a
    # refusal, and a few hours of outage lost the replies queued during it.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once closed
    config = make_config(tmp_path, 1, port, "INBOX")
    with pytest.raises(Unreachable, match=rf"SMTP server 127\.0\.0\.1:{port}"):
        await EmailChannel(config).send(_reply_to_utf8_id())
