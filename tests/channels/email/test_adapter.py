"""EmailChannel against real pymap (IMAP) and aiosmtpd (SMTP) with the real clients,
driven by a fake ChannelHost (the end-to-end tests with the real core are elsewhere)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from bot.channel import PermanentSendError
from bot.config.model import AppConfig
from bot.events import EMPTY_MESSAGE_LABEL, OutboundMessage
from channels.email.adapter import Backoff, EmailChannel
from channels.email.imap_wire import mailbox_name
from channels.email.unfetched import FETCH_ATTEMPTS
from tests.channels.email.conftest import (
    PASSWORD,
    USER,
    FakeHost,
    Proxy,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    email_channel,
    folder_state,
    imap_client,
)
from tests.channels.email.helpers import mail_id, text_of
from tests.support import wait_logged, wait_until

OWNER = "owner@example.org"


def make_config(
    tmp_path: Path, imap_port: int, smtp_port: int, folder: str, **email: Any
) -> AppConfig:
    imap = email.pop("imap", {})
    return AppConfig.model_validate(
        {
            "data_dir": str(tmp_path),
            "owner": {"identities": {"email": [OWNER]}},
            "channels": {"email": email_channel(imap_port, smtp_port, folder, imap=imap, **email)},
        }
    )


def mail(
    n: int,
    *,
    sender: str = OWNER,
    subject: str = "Hello",
    body: str = "Hi there",
    headers: dict[str, str] | None = None,
) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = f"Owner <{sender}>"
    msg["To"] = USER
    msg["Subject"] = subject
    msg["Message-ID"] = f"<m{n}@example.org>"
    msg["Date"] = "Tue, 14 Jan 2025 09:12:00 +0100"
    msg["Authentication-Results"] = (
        "mx.example.com; dkim=pass header.d=example.org; spf=pass smtp.mailfrom=example.org"
    )
    for key, value in (headers or {}).items():
        msg[key] = value
    msg.set_content(body)
    return msg


Factory = Callable[..., "asyncio.Future[EmailChannel]"]


async def start(channels: list[EmailChannel], config: AppConfig, host: FakeHost) -> EmailChannel:
    channel = EmailChannel(config, None)
    channels.append(channel)
    await channel.start(host)
    # start() waits for the first sync at most imap.timeout (5 s here): at a load of 10
    # on two cores the first test's sync took longer (session 26); ready it must be.
    await asyncio.wait_for(channel.ready.wait(), 60)
    return channel


def is_seen(flags: bytes) -> bool:
    return b"\\Seen" in flags


async def test_inbound_parsed_delivered_then_seen(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    reply = mail(
        1,
        subject="Re: Plans",
        body="Sounds good.\n\nOn Mon, 13 Jan 2025 at 10:00, My Assistant <bot@example.com> "
        "wrote:\n> Shall we meet?\n",
        headers={
            "In-Reply-To": "<ours2@example.com>",
            "References": "<ours1@example.com> <ours2@example.com>",
            "Cc": "friend@example.net",
        },
    )
    reply.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="plan.pdf")
    await append(pymap.port, folder, reply)
    host = FakeHost()
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    [msg] = await host.wait_for(1)
    assert msg.channel == "email"
    assert msg.sender_id == OWNER and msg.chat_id == OWNER and msg.sender_name == "Owner"
    assert msg.text == "Sounds good.\n\n[attachment: plan.pdf, 8 bytes]"
    assert "Shall we meet?" in msg.metadata["full_body"]
    assert mail_id(msg.message_id) == msg.message_ref == "<m1@example.org>"
    assert msg.thread_refs == ("<ours2@example.com>", "<ours1@example.com>")
    assert msg.subject == "Re: Plans"
    assert msg.identity_verified is True
    assert [(a.name, a.mime_type, a.size) for a in msg.attachments] == [
        ("plan.pdf", "application/pdf", 8)
    ]
    assert msg.metadata["cc"] == ["friend@example.net"]
    assert msg.metadata["date"] == "2025-01-14T08:12:00.000Z"
    assert msg.metadata["sentAt"] == "2025-01-14T08:12:00.000Z"  # every channel's key
    # Marked only after delivery, and the cursor points at it.
    for _ in range(50):
        state = await folder_state(pymap.port, folder)
        if all(is_seen(f) for f in state.values()):
            break
        await asyncio.sleep(0.05)
    assert all(is_seen(f) for f in state.values())
    assert host.cursors[("email", f"{folder}:last_uid")] == str(max(state))


async def test_a_mail_that_says_everything_in_its_subject_is_not_an_empty_turn(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # "Book a table at Luigi's for 8 tonight" typed as the subject, the body left empty:
    # the model was shown no subject, and the turn used to be empty.
    folder = await create_folder(pymap.port)
    only_subject = mail(1, subject="Book a table at Luigi's for 8 tonight", body="")
    with_file = mail(2, subject="Invoice for March", body="\n")
    with_file.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="m.pdf")
    command = mail(3, subject="/status", body="")
    # A reply's subject only repeats the thread's: not taken for the sender's words.
    empty_reply = mail(4, subject="Re: Plans", body="", headers={"In-Reply-To": "<o@x.com>"})
    said = mail(5, subject="Lunch", body="Friday at one?")
    for item in (only_subject, with_file, command, empty_reply, said):
        await append(pymap.port, folder, item)
    host = FakeHost()
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    got = {mail_id(m.message_id): m for m in await host.wait_for(5)}
    assert got["<m1@example.org>"].text == "Book a table at Luigi's for 8 tonight"
    assert got["<m2@example.org>"].text == "Invoice for March\n\n[attachment: m.pdf, 8 bytes]"
    assert got["<m3@example.org>"].text == "/status"
    # (and the owner's blank reply is labelled as Telegram labels it: test_subject.py)
    assert got["<m4@example.org>"].text == EMPTY_MESSAGE_LABEL
    # A subject beside a body says something too: the model is shown it (test_subject.py).
    assert got["<m5@example.org>"].text == "Subject: Lunch\n\nFriday at one?"
    assert all(m.subject for m in got.values())


@pytest.mark.parametrize("idle", [True, False], ids=["idle", "polling"])
async def test_new_mail_arrives_while_running(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
    idle: bool,
) -> None:
    caplog.set_level(logging.DEBUG, logger="my_agent.email.imap")
    folder = await create_folder(pymap.port)
    host = FakeHost()
    config = make_config(
        tmp_path,
        pymap.port,
        smtp.port,
        folder,
        imap={"idle": idle, "poll_interval": 3 if idle else 0.2},
    )
    await start(channels, config, host)
    if idle:
        # pymap pushes in IDLE only what comes after it started (imap.py), and it starts
        # listening a moment after its "+ Idling": a mail delivered before that waits
        # for the next IDLE (3 s here, poll_interval). Deliver once IDLE is on.
        async with asyncio.timeout(60):
            while not any("IDLE acknowledged" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.01)
    await append(pymap.port, folder, mail(1))
    await append(pymap.port, folder, mail(2))
    got = await host.wait_for(2)
    assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>", "<m2@example.org>"]


async def test_refused_delivery_is_not_marked_and_retried(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    host.fail_next = 10**6
    await append(pymap.port, folder, mail(1))
    channel = EmailChannel(
        make_config(
            tmp_path, pymap.port, smtp.port, folder, imap={"idle": False, "poll_interval": 0.1}
        )
    )
    channels.append(channel)
    await channel.start(host)
    while host.refused < 2:  # refused, then retried
        await asyncio.sleep(0.05)
    state = await folder_state(pymap.port, folder)
    assert not any(is_seen(f) for f in state.values())  # refused: still unseen
    host.fail_next = 0
    got = await host.wait_for(1)
    assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>"]
    await asyncio.sleep(0.3)
    assert len(host.delivered) == 1


async def test_restart_reprocesses_nothing(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    config = make_config(tmp_path, pymap.port, smtp.port, folder)
    for n in (1, 2):
        await append(pymap.port, folder, mail(n))
    first = await start(channels, config, host)
    await host.wait_for(2)
    await first.stop()
    await append(pymap.port, folder, mail(3))  # arrives while we are down
    await start(channels, config, host)
    got = await host.wait_for(3)
    await asyncio.sleep(0.2)
    assert [mail_id(m.message_id) for m in host.delivered] == [
        "<m1@example.org>",
        "<m2@example.org>",
        "<m3@example.org>",
    ]
    assert len(got) == 3


async def test_uidvalidity_change_resyncs_unseen_only(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    config = make_config(tmp_path, pymap.port, smtp.port, folder)
    await append(pymap.port, folder, mail(1))
    first = await start(channels, config, host)
    await host.wait_for(1)
    await first.stop()
    host.renumber(folder)
    await append(pymap.port, folder, mail(2))
    await start(channels, config, host)
    await host.wait_for(2)
    await asyncio.sleep(0.2)
    assert [mail_id(m.message_id) for m in host.delivered] == [
        "<m1@example.org>",
        "<m2@example.org>",
    ]


async def test_connection_dropped_during_idle_reconnects_without_loss(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="my_agent.email.imap")
    folder = await create_folder(pymap.port)
    proxy = Proxy(pymap.port)
    await proxy.start()
    try:
        host = FakeHost()
        config = make_config(
            tmp_path, proxy.port, smtp.port, folder, imap={"idle": True, "poll_interval": 30}
        )
        channel = await start(channels, config, host)
        await wait_logged(caplog, "IDLE acknowledged")  # in IDLE now (was: a 0.2 s sleep)
        # No new session until the mail is in: reconnecting within 0.05 s, one could
        # search the folder before the APPEND and start IDLE just after it, and the mail
        # then waited for the next IDLE (30 s here), as long as host.wait_for waits.
        proxy.refuse = True
        proxy.cut()
        await append(pymap.port, folder, mail(1))  # delivered while we are cut off
        proxy.refuse = False
        got = await host.wait_for(1)
        assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>"]
        assert channel.connects >= 2
        # The new session's IDLE (after its sync, which found mail 1): pymap pushes in
        # IDLE only what comes once it listens (see test_new_mail_arrives_while_running).
        await wait_logged(caplog, "IDLE acknowledged", count=2)
        await append(pymap.port, folder, mail(2))  # and IDLE works again afterwards
        await host.wait_for(2)
    finally:
        await proxy.stop()


async def test_a_stop_is_no_lost_connection_and_a_real_loss_says_why(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: every normal stop logged "IMAP connection lost: None".
    folder = await create_folder(pymap.port)
    proxy = Proxy(pymap.port)
    await proxy.start()
    try:
        config = make_config(
            tmp_path, proxy.port, smtp.port, folder, imap={"idle": True, "poll_interval": 30}
        )
        caplog.set_level(logging.INFO, logger="my_agent.email")
        caplog.set_level(logging.DEBUG, logger="my_agent.email.imap")
        channel = EmailChannel(config, None)
        await channel.start(FakeHost())
        await wait_logged(caplog, "IDLE acknowledged")  # in IDLE now (was: a 0.2 s sleep)
        proxy.cut()
        await wait_until(lambda: channel.connects >= 2, what="the reconnection")
        lost = [r.getMessage() for r in caplog.records if "IMAP connection" in r.getMessage()]
        assert lost and all("None" not in line for line in lost), lost
        caplog.clear()
        await channel.stop()
        # The socket's close is reported a loop turn later: wait for it (our own close,
        # logged at DEBUG), then check that it was not said at INFO as a loss. Before, a
        # fixed 0.1 s, which a busy machine could outlast (the check then proved nothing).
        await wait_logged(caplog, "IMAP connection closed")
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
        assert not [line for line in said if "IMAP connection" in line], said
    finally:
        await proxy.stop()


async def test_a_command_fails_as_soon_as_the_connection_is_lost(pymap: PymapServer) -> None:
    # Regression: aioimaplib notices a lost socket but leaves a command in flight waiting
    # for its whole timeout; after a server restart the session sat 30 s (mail unseen)
    # before reconnecting. Every command now ends with the connection.
    from channels.email.imap import ImapSession
    from channels.email.imap_wire import ImapError

    proxy = Proxy(pymap.port)
    await proxy.start()
    try:
        config = make_config(Path("."), proxy.port, 1, "INBOX", imap={"timeout": 30})
        session = ImapSession(config.channels.email.imap, USER, PASSWORD, 30)
        await session.connect()
        proxy.hold = True  # NOOP goes nowhere: no answer will come
        noop = asyncio.ensure_future(session.noop())
        # the NOOP has reached the proxy (swallowed there); was: a 0.2 s sleep
        await wait_until(lambda: b"NOOP" in proxy.client_said, what="the NOOP sent")
        proxy.cut()
        with pytest.raises(ImapError, match="connection lost during NOOP"):
            await asyncio.wait_for(noop, 5)  # not the 30 s command timeout
        session.abort()
    finally:
        await proxy.stop()


async def test_a_big_mail_on_a_slow_link_is_fetched_not_retried_forever(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # imap.timeout bounds silence, not a whole download: a mail with a large attachment
    # that took longer than the timeout to arrive (while arriving all along) was cut off,
    # refetched after a reconnect, cut off again, forever, and every later mail waited.
    folder = await create_folder(pymap.port)
    big = mail(1, subject="Scans")
    big.add_attachment(os.urandom(400_000), maintype="application", subtype="pdf", filename="a.pdf")
    await append(pymap.port, folder, big)
    await append(pymap.port, folder, mail(2))
    proxy = Proxy(pymap.port)
    await proxy.start()
    try:
        proxy.rate = 200_000  # bytes/s: the mail takes about 3 s, the timeout is 1 s
        host = FakeHost()
        config = make_config(tmp_path, proxy.port, smtp.port, folder, imap={"timeout": 1})
        channel = EmailChannel(config, None)
        channels.append(channel)
        await channel.start(host)
        got = await host.wait_for(2, timeout=20)
        assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>", "<m2@example.org>"]
        assert got[0].attachments[0].size == 400_000
    finally:
        await proxy.stop()


async def test_a_mail_that_cannot_be_fetched_holds_up_no_later_mail(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # A server that hangs up on (or refuses) the FETCH of one mail, every time: the
    # channel reconnected and fetched it again forever, and no later mail ever arrived.
    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, mail(1, subject="Unreadable"))
    await append(pymap.port, folder, mail(2, subject="Fine"))
    bad, good = sorted(await folder_state(pymap.port, folder))
    proxy = Proxy(pymap.port)
    await proxy.start()
    try:
        proxy.drop_on = f"FETCH {bad} ".encode()
        host = FakeHost()
        channel = EmailChannel(make_config(tmp_path, proxy.port, smtp.port, folder), None)
        channels.append(channel)
        await channel.start(host)
        [got] = await host.wait_for(1, timeout=20)
        assert mail_id(got.message_id) == "<m2@example.org>"
        assert channel.connects >= FETCH_ATTEMPTS
        for _ in range(50):
            state = await folder_state(pymap.port, folder)
            if is_seen(state[good]):
                break
            await asyncio.sleep(0.05)
        assert not is_seen(state[bad]) and is_seen(state[good])  # the owner still sees it
    finally:
        await proxy.stop()


async def test_a_forwarded_mail_reaches_the_core_whole(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # "Please handle this" + a forward is what an assistant gets mailed most; the quote
    # stripper used to cut the forwarded message off as history (it looks like one).
    folder = await create_folder(pymap.port)
    outlook = (
        "Please book it.\n\n________________________________\n"
        "From: Alice <alice@example.net>\nSent: Monday, January 13, 2025 6:02 PM\n"
        "To: Owner <owner@example.org>\nSubject: Dinner\n\nDinner at 8pm on Friday.\n"
    )
    gmail = (
        "\n---------- Forwarded message ---------\nFrom: Bob <bob@example.net>\n"
        "Date: Mon, 13 Jan 2025 at 18:02\nSubject: Lunch\nTo: <owner@example.org>\n\n"
        "Lunch at noon on Saturday.\n"
    )
    reply = "Thanks!\n\n" + outlook.split("\n\n", 1)[1]  # the same history, as a reply
    await append(pymap.port, folder, mail(1, subject="FW: Dinner", body=outlook))
    await append(pymap.port, folder, mail(2, subject="Fwd: Lunch", body=gmail))
    await append(pymap.port, folder, mail(3, subject="RE: Dinner", body=reply))
    host = FakeHost()
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    first, second, third = await host.wait_for(3)
    # (a forward's subject is shown first: it says what comes)
    assert first.text.startswith("Subject: FW: Dinner\n\nPlease book it.\n\n")
    assert first.text.endswith("Friday.")
    assert second.text.startswith("Subject: Fwd: Lunch\n\n---------- Forwarded message")
    assert "noon" in second.text
    assert third.text == "Thanks!"


async def test_processed_folder_move(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    done = f"{folder}done"
    host = FakeHost()
    await append(pymap.port, folder, mail(1))
    await start(
        channels,
        make_config(tmp_path, pymap.port, smtp.port, folder, imap={"processed_folder": done}),
        host,
    )
    await host.wait_for(1)
    for _ in range(50):
        if not await folder_state(pymap.port, folder):
            break
        await asyncio.sleep(0.05)
    assert await folder_state(pymap.port, folder) == {}
    assert len(await folder_state(pymap.port, done)) == 1


async def test_folder_names_with_spaces_and_accents(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # aioimaplib sends a mailbox name as it is: "Bot Inbox" went out as two words (SELECT
    # failed, reconnecting forever) and "Erledigt Ä" as raw UTF-8 instead of modified
    # UTF-7 (every MOVE failed after the delivery, and the session with it).
    base = await create_folder(pymap.port)
    folder, done = f"{base} Bot Inbox", f"{base} Erledigt Ä"
    client = await imap_client(pymap.port)
    try:
        assert (await client.create(mailbox_name(folder))).result == "OK"
    finally:
        await client.logout()
    assert mailbox_name(done).endswith(' Erledigt &AMQ-"')
    await append(pymap.port, mailbox_name(folder), mail(1))
    host = FakeHost()
    config = make_config(
        tmp_path, pymap.port, smtp.port, folder, imap={"processed_folder": done, "timeout": 2}
    )
    channel = EmailChannel(config, None)
    channels.append(channel)
    await channel.start(host)
    await host.wait_for(1, timeout=10)
    for _ in range(50):
        if not await folder_state(pymap.port, mailbox_name(folder)):
            break
        await asyncio.sleep(0.05)
    assert await folder_state(pymap.port, mailbox_name(folder)) == {}
    assert len(await folder_state(pymap.port, mailbox_name(done))) == 1
    assert channel.connects == 1


async def test_own_mail_skipped_and_spoof_unverified(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    own = mail(1, sender=USER)
    spoof = mail(2)
    del spoof["Authentication-Results"]
    spoof["Authentication-Results"] = "mx.example.com; dkim=fail; spf=softfail"
    for msg in (own, spoof):
        await append(pymap.port, folder, msg)
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    [got] = await host.wait_for(1)
    assert mail_id(got.message_id) == "<m2@example.org>"
    assert got.identity_verified is False


async def test_send_threaded_reply(smtp: SmtpServer, tmp_path: Path) -> None:
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    result = await channel.send(
        OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Booked for Thursday.",
            in_reply_to="<m2@example.org>",
            thread_refs=("<m1@example.org>", "<m2@example.org>"),
            subject="RE: Re: Plans",
            metadata={"to": [USER, "colleague@example.org"], "cc": ["friend@example.net"]},
        )
    )
    [sent] = await smtp.capture.wait_for(1)
    assert sent["Message-ID"] == result.message_ref
    assert result.message_ref and result.message_ref.endswith("@example.com>")
    assert sent["From"] == "My Assistant <bot@example.com>"
    assert sent["To"] == f"{OWNER}, colleague@example.org"
    assert sent["Cc"] == "friend@example.net"
    assert sent["Subject"] == "Re: Plans"
    assert sent["In-Reply-To"] == "<m2@example.org>"
    assert sent["References"] == "<m1@example.org> <m2@example.org>"
    assert sent["Date"]
    # the text, and its Markdown shown as HTML beside it (channels/email/html_body.py)
    assert sent.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in sent.iter_parts()] == ["text/plain", "text/html"]
    assert all(p.get_content_charset() == "utf-8" for p in sent.iter_parts())
    assert text_of(sent).strip() == "Booked for Thursday."
    envelope, _ = smtp.capture.messages[0]
    assert envelope.mail_from == USER
    assert sorted(envelope.rcpt_tos) == sorted(
        [OWNER, "colleague@example.org", "friend@example.net"]
    )


async def test_a_mails_id_is_known_before_the_mail_leaves(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # The Message-ID was recorded with its conversation once the SMTP server had taken
    # the mail: a server-side out-of-office reply, fetched in that gap, found no thread
    # and opened a conversation of its own (as did the owner's answer after a crash
    # between the send and the record). Retries of the mail record it once.
    recorded: list[tuple[str, int]] = []  # (ref, mails the server had by then)

    class Host(FakeHost):
        async def record_message_ref(self, channel: str, ref: str, conversation_id: str) -> None:
            recorded.append((ref, len(smtp.capture.messages)))
            await super().record_message_ref(channel, ref, conversation_id)

    host = Host()
    folder = await create_folder(pymap.port)
    channel = await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    reply = OutboundMessage(
        channel="email", chat_id=OWNER, text="Hi", conversation_id="conv-1", send_key="k:reply"
    )
    result = await channel.send(reply)
    [sent] = await smtp.capture.wait_for(1)
    assert recorded == [(sent["Message-ID"], 0)]
    assert host.refs == {result.message_ref: "conv-1"}
    await channel.send(reply)  # a retry: the same id, not recorded again
    await smtp.capture.wait_for(2)
    assert recorded == [(result.message_ref, 0)]


async def test_a_reply_with_a_stray_surrogate_is_sent_not_lost(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # A lone surrogate (a JavaScript string cut in the middle of an emoji, a pair split
    # between two streamed pieces) could not be encoded: the reply failed for good
    # (PermanentSendError), the owner's or the model's whole text lost for one character.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    text = "Done \ud83d" + "\ude00 see you at 8 \ud83d"
    message = OutboundMessage(
        channel="email",
        chat_id=OWNER,
        text=text,
        subject="Dinner \udc80",
        conversation_id="c1",
        send_key="c1:3:reply",
    )
    first = await channel.send(message)
    again = await channel.send(message)  # a retry keeps its Message-ID
    sent = await smtp.capture.wait_for(2)
    assert text_of(sent[0]).strip() == "Done \U0001f600 see you at 8 \ufffd"
    assert sent[0]["Subject"] == "Re: Dinner \ufffd"  # a reply (session 38: without "Re:")
    assert first.message_ref == again.message_ref == sent[0]["Message-ID"]


async def test_reply_all_never_answers_all_when_we_were_blind_copied(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # The owner writes to Bob and Bcc's the assistant: with reply_all, the reply (the
    # model's, recall included) went to Bob too, and told him of the blind copy.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX", reply_all=True))
    await channel.send(
        OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Noted: dinner with Bob on Friday.",
            in_reply_to="<m9@example.org>",
            subject="Dinner",
            metadata={"to": ["bob@example.net"], "cc": ["anna@example.net"]},
        )
    )
    [sent] = await smtp.capture.wait_for(1)
    assert sent["To"] == OWNER and sent["Cc"] is None
    envelope, _ = smtp.capture.messages[0]
    assert envelope.rcpt_tos == [OWNER]


async def test_send_failures(smtp: SmtpServer, tmp_path: Path) -> None:
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    smtp.capture.reject_rcpt["gone@example.org"] = "550 5.1.1 No such user"
    smtp.capture.reject_rcpt["busy@example.org"] = "451 4.3.0 Try again later"
    with pytest.raises(PermanentSendError):
        await channel.send(OutboundMessage(channel="email", chat_id="gone@example.org", text="x"))
    with pytest.raises(Exception) as info:
        await channel.send(OutboundMessage(channel="email", chat_id="busy@example.org", text="x"))
    assert not isinstance(info.value, PermanentSendError)
    await smtp.stop()
    with pytest.raises(Exception) as info:
        await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    assert not isinstance(info.value, PermanentSendError)
    await smtp.start()  # same port
    await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text="back"))
    [sent] = await smtp.capture.wait_for(1)
    assert sent["Subject"] == "Message from My Assistant"
    # A mail that cannot even be composed fails the same way on every retry, and the
    # outbox sends in order: it must not be retried (holding up all later mail).
    with pytest.raises(PermanentSendError):
        await channel.send(OutboundMessage(channel="email", chat_id="a@b\rc.example", text="x"))


async def test_internationalised_address_without_smtputf8_is_not_retried(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # A stranger writing from jöhn@example.de, and a server without SMTPUTF8 (aiosmtpd's
    # default): the same refusal on every retry, and the outbox sends in order, so
    # retrying would hold up every mail behind the acknowledgement for hours.
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    with pytest.raises(PermanentSendError):
        await channel.send(OutboundMessage(channel="email", chat_id="jöhn@example.de", text="x"))
    await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text="still fine"))
    [sent] = await smtp.capture.wait_for(1)
    assert sent["To"] == OWNER
    # Our own address is the owner's configuration to fix: retried, kept meanwhile.
    channel.address = "bøt@example.com"
    with pytest.raises(Exception) as info:
        await channel.send(OutboundMessage(channel="email", chat_id=OWNER, text="x"))
    assert not isinstance(info.value, PermanentSendError)


async def test_escalation_and_acknowledgement_rendering(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    bounce = mail(
        1,
        sender="mailer-daemon@example.net",
        subject="Undelivered Mail",
        headers={"Auto-Submitted": "auto-replied"},
    )
    stranger = mail(2, sender="stranger@example.net", subject="Offer")
    for msg in (bounce, stranger):
        await append(pymap.port, folder, msg)
    channel = await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    await host.wait_for(2)
    # No acknowledgement to automatic mail (mail loops); a stranger gets one, threaded.
    skipped = await channel.send(
        OutboundMessage(
            channel="email",
            chat_id="mailer-daemon@example.net",
            text="Thanks",
            kind="acknowledgement",
        )
    )
    assert skipped.message_ref is None
    await channel.send(
        OutboundMessage(
            channel="email", chat_id="stranger@example.net", text="Thanks", kind="acknowledgement"
        )
    )
    await channel.send(
        OutboundMessage(
            channel="email",
            chat_id=OWNER,
            text="Message from stranger",
            kind="escalation",
            actions=(("Trust", "/trust p1"), ("Block", "/block p1")),
            subject="Message from x",
        )
    )
    ack, escalation = await smtp.capture.wait_for(2)
    assert ack["To"] == "stranger@example.net"
    assert ack["In-Reply-To"] == "<m2@example.org>" and ack["Subject"] == "Re: Offer"
    assert ack["Auto-Submitted"] == "auto-replied"
    body = text_of(escalation)
    assert "/trust p1" in body and "/block p1" in body
    assert escalation["Subject"] == "Message from x"
    assert escalation["In-Reply-To"] is None


async def test_the_acknowledgement_of_a_mail_without_message_id_joins_no_other_thread(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # A stranger's mail without a Message-ID: its acknowledgement went In-Reply-To their
    # previous mail, and showed up in that (unrelated) thread in their client.
    folder = await create_folder(pymap.port)
    lunch = mail(1, sender="stranger@example.net", subject="Lunch")
    invoice = mail(2, sender="stranger@example.net", subject="Invoice")
    del invoice["Message-ID"]
    for msg in (lunch, invoice):
        await append(pymap.port, folder, msg)
    host = FakeHost()
    channel = await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder), host)
    _, got = await host.wait_for(2)
    assert got.message_id.startswith("sha256:")
    await channel.send(
        OutboundMessage(
            channel="email",
            chat_id="stranger@example.net",
            text="Thanks",
            kind="acknowledgement",
            in_reply_to=got.message_id,
            subject=got.subject,
        )
    )
    [ack] = await smtp.capture.wait_for(1)
    assert ack["In-Reply-To"] is None and ack["References"] is None
    assert ack["Subject"] == "Re: Invoice"  # an answer all the same (session 38: "Invoice")


async def test_outbox_retry_keeps_message_id(smtp: SmtpServer, tmp_path: Path) -> None:
    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    msg = OutboundMessage(
        channel="email", chat_id=OWNER, text="same", outbox_id=7, conversation_id="conv-1"
    )
    first = await channel.send(msg)
    again = await channel.send(msg)  # the outbox retrying after a lost SMTP answer
    other = await channel.send(
        OutboundMessage(
            channel="email", chat_id=OWNER, text="same", outbox_id=8, conversation_id="conv-1"
        )
    )
    assert first.message_ref == again.message_ref != other.message_ref
    sent = await smtp.capture.wait_for(3)
    assert sent[0]["Message-ID"] == sent[1]["Message-ID"]


async def test_message_ids_stay_unique_after_state_db_is_lost(
    smtp: SmtpServer, tmp_path: Path
) -> None:
    # Regression: the Message-ID was derived from the outbox row's id, the conversation
    # and the text. A lost state.db numbers the outbox from 1 again, so an identical
    # answer in the same conversation (a "Noted." acknowledgement, a command's answer) got
    # the Message-ID of an earlier mail: recipients' clients hid it as a duplicate, and
    # the owner's reply to it was threaded by an id that meant two mails.
    from bot.db import Database
    from bot.outbox import Outbox
    from bot.schema import STATE_MIGRATIONS

    channel = EmailChannel(make_config(tmp_path, 1, smtp.port, "INBOX"))
    notice = OutboundMessage(
        channel="email", chat_id=OWNER, text="Noted.", kind="notice", conversation_id="conv-1"
    )
    for attempt in range(2):  # the second state.db replaces a lost one
        state = await Database.open(tmp_path / f"state-{attempt}.db", STATE_MIGRATIONS)
        outbox = Outbox(state)
        try:
            assert await outbox.enqueue(notice) == 1
            outbox.attach(channel)
            await smtp.capture.wait_for(2 * attempt + 1)
            for _ in range(500):  # the "sent" mark commits after the SMTP answer
                if await outbox.pending_count() == 0:
                    break
                await asyncio.sleep(0.02)
            [row] = await outbox.sent_messages("email")
        finally:
            await outbox.stop()
            await state.close()
        await channel.send(row)  # the same row again (a retry after a lost SMTP answer)
    sent = await smtp.capture.wait_for(4)
    first, first_retry, second, second_retry = (m["Message-ID"] for m in sent)
    assert first == first_retry and second == second_retry
    assert first != second
    # a reply is keyed by its transcript turn: the same turn, the same id, state.db or not
    reply = OutboundMessage(channel="email", chat_id=OWNER, text="Hi", conversation_id="conv-1")
    state = await Database.open(tmp_path / "state-2.db", STATE_MIGRATIONS)
    try:
        outbox = Outbox(state)
        await outbox.enqueue(reply, dedup_key="conv-1:3:reply")
        await outbox.enqueue(reply, dedup_key="conv-1:5:reply")
        rows = await state.fetchall("SELECT id, payload FROM outbox ORDER BY id")
    finally:
        await state.close()
    from bot.outbox import _decode

    three = await channel.send(_decode(rows[0][1], rows[0][0]))
    five = await channel.send(_decode(rows[1][1], rows[1][0]))
    assert three.message_ref != five.message_ref
    assert three.message_ref not in (first, second)


def test_backoff_grows_with_jitter_and_resets() -> None:
    backoff = Backoff(1.0, 8.0)
    delays = [backoff.next() for _ in range(6)]
    for n, delay in enumerate(delays):
        cap = min(8.0, 2.0**n)
        assert cap / 2 <= delay <= cap
    backoff.reset()
    assert backoff.next() <= 1.0


async def test_initial_sync_none_starts_with_the_next_mail(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, mail(1))  # old unread mail: left alone
    host = FakeHost()
    await start(
        channels,
        make_config(tmp_path, pymap.port, smtp.port, folder, imap={"initial_sync": "none"}),
        host,
    )
    await append(pymap.port, folder, mail(2))
    got = await host.wait_for(1)
    await asyncio.sleep(0.2)
    assert [mail_id(m.message_id) for m in got] == ["<m2@example.org>"]


@pytest.mark.parametrize("processed", [None, "Done"], ids=["unseen", "processed-folder"])
async def test_the_first_start_does_not_answer_the_backlog(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    processed: str | None,
) -> None:
    # Pointed at a mailbox with years of unread mail (or, with a processed folder, of
    # any mail), the first start handed every one to the core: an answer to each, an
    # acknowledgement and an escalation for each stranger. What arrived before
    # yesterday is left where it is, unread; what came since is still handled.
    folder = await create_folder(pymap.port)
    old = datetime.now(UTC) - timedelta(days=400)
    for n in range(1, 31):
        await append(pymap.port, folder, mail(n), arrived=old)
    await append(pymap.port, folder, mail(31))  # arrived just before the first start
    host = FakeHost()
    imap: dict[str, Any] = {"processed_folder": f"{folder}{processed}"} if processed else {}
    await start(channels, make_config(tmp_path, pymap.port, smtp.port, folder, imap=imap), host)
    await append(pymap.port, folder, mail(32))
    got = await host.wait_for(2)
    await asyncio.sleep(0.3)
    assert [mail_id(m.message_id) for m in host.delivered] == [
        "<m31@example.org>",
        "<m32@example.org>",
    ]
    state = await folder_state(pymap.port, folder)
    backlog = [state[uid] for uid in sorted(state)[:30]]
    assert len(backlog) == 30 and not any(is_seen(flags) for flags in backlog)
    assert len(got) == 2


def test_config_requires_address_when_enabled(tmp_path: Path) -> None:
    from bot.config import ConfigError, build_config

    with pytest.raises(ConfigError) as info:
        build_config({"channels": {"email": {"enabled": True, "password": "x"}}}, env={})
    assert info.value.key == "channels.email.address"
    build_config({"channels": {"email": {"enabled": False}}}, env={})


async def test_a_session_dropped_right_after_its_sync_backs_off(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that takes the login and drops the connection at once: each sync
    succeeded and reset the backoff, so it was reconnected about every second, with a
    warning each time, for as long as it lasted."""
    folder = await create_folder(pymap.port)
    delays: list[float] = []
    done = asyncio.Event()

    async def dropped(self: EmailChannel, session: Any) -> None:
        raise ConnectionResetError("connection dropped after the sync")

    async def recorded(self: EmailChannel, seconds: float) -> None:
        delays.append(seconds)
        if len(delays) >= 5:
            done.set()
            await self._stopping.wait()

    monkeypatch.setattr(EmailChannel, "_watch", dropped)
    monkeypatch.setattr(EmailChannel, "_sleep", recorded)
    channel = await start(
        channels, make_config(tmp_path, pymap.port, smtp.port, folder), FakeHost()
    )
    await asyncio.wait_for(done.wait(), 60)
    initial = channel._cfg.imap.reconnect_initial
    # (a login that times out on a busy machine fails before it counts as a connect)
    assert channel.connects >= 2
    assert delays[4] > initial  # 16x the first delay, with jitter: 8-16x; reset: <= 1x


async def test_a_slow_first_sync_is_not_called_unreachable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: with 30 mails waiting on a loaded machine, the log said "IMAP
    # connected to INBOX", then "IMAP not reachable yet; retrying in the background":
    # the start's wait for the first sync had ended, the connection had not.
    config = make_config(tmp_path, 1, 1, "INBOX", imap={"timeout": 0.2})
    channel = EmailChannel(config, None)
    syncing = asyncio.Event()

    async def connected_and_syncing(self: EmailChannel) -> None:
        self.connects += 1
        syncing.set()
        await asyncio.Event().wait()  # the first sync, still fetching

    monkeypatch.setattr(EmailChannel, "_run", connected_and_syncing)
    with caplog.at_level(logging.INFO, logger="my_agent.email"):
        await channel.start(FakeHost())
    try:
        assert syncing.is_set()
        assert "not reachable" not in caplog.text
        assert "first sync goes on in the background" in caplog.text
    finally:
        await channel.stop()
