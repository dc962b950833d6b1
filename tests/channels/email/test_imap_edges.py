"""IMAP servers as they are: one that offers no IDLE, another client deleting a mail
between our SEARCH and our FETCH, a folder renumbered (UIDVALIDITY) with an old backlog
in it. Real pymap, the real adapter, a fake host: nothing lost, nothing delivered twice
or for the first time years late, and a log line saying what happened."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from channels.email.adapter import EmailChannel
from channels.email.imap import ImapSession
from channels.email.imap_wire import mailbox_name
from tests.channels.email.conftest import (
    FakeHost,
    Proxy,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    imap_client,
)
from tests.channels.email.helpers import mail_id
from tests.channels.email.test_adapter import mail, make_config, start


def without_idle(data: bytes) -> bytes:
    """The server's words with IDLE gone from its capabilities."""
    return data.replace(b" IDLE", b"")


async def test_a_server_without_idle_is_polled_and_says_so(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = await create_folder(pymap.port)
    proxy = Proxy(pymap.port)
    proxy.rewrite = without_idle
    await proxy.start()
    try:
        host = FakeHost()
        config = make_config(
            tmp_path, proxy.port, smtp.port, folder, imap={"idle": True, "poll_interval": 0.2}
        )
        with caplog.at_level(logging.INFO, logger="my_agent.email"):
            await start(channels, config, host)
            await append(pymap.port, folder, mail(1))
            await append(pymap.port, folder, mail(2))
            got = await host.wait_for(2)
        assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>", "<m2@example.org>"]
        assert b"IDLE\r\n" not in proxy.client_said  # never asked for what is not offered
        assert any("offers no IDLE" in r.getMessage() for r in caplog.records)
    finally:
        await proxy.stop()


async def delete(port: int, folder: str, uid: int) -> None:
    """Another mail client deleting (and expunging) one mail."""
    client = await imap_client(port)
    try:
        await client.select(mailbox_name(folder))
        response = await client.uid("store", str(uid), "+FLAGS.SILENT (\\Deleted)")
        assert response.result == "OK", response
        assert (await client.expunge()).result == "OK"
    finally:
        await client.logout()


async def test_a_mail_deleted_between_search_and_fetch_is_no_loss_and_said(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = await create_folder(pymap.port)
    search = ImapSession.search_uids
    doomed: list[int] = []

    async def search_then_delete(session: ImapSession, criteria: str) -> list[int]:
        # The owner's phone deletes the first new mail right after our SEARCH found it.
        uids = await search(session, criteria)
        if uids and not doomed and criteria.startswith("UID "):
            doomed.append(uids[0])
            await delete(pymap.port, folder, uids[0])
            await session.noop()  # the server tells this session of the EXPUNGE
        return uids

    host = FakeHost()
    config = make_config(tmp_path, pymap.port, smtp.port, folder, imap={"poll_interval": 0.2})
    with caplog.at_level(logging.INFO, logger="my_agent.email"):
        channel = await start(channels, config, host)
        monkeypatch.setattr(ImapSession, "search_uids", search_then_delete)
        await append(pymap.port, folder, mail(1))
        await append(pymap.port, folder, mail(2))
        channel.poke()
        got = await host.wait_for(1)
        assert [mail_id(m.message_id) for m in got] == ["<m2@example.org>"]
        await append(pymap.port, folder, mail(3))  # nothing held up behind it
        got = await host.wait_for(2)
    assert [mail_id(m.message_id) for m in got] == ["<m2@example.org>", "<m3@example.org>"]
    assert doomed == [101]
    gone: list[Any] = [r for r in caplog.records if "is gone" in r.getMessage()]
    assert [r.args[0] for r in gone] == [101]


async def test_a_renumbered_folder_does_not_hand_over_the_backlog(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # The first start leaves years of unread mail alone (a backlog, never answered).
    # When the server renumbered the folder (a rebuilt index, a migration), the resync
    # took every unread mail: the whole backlog went to the core and was answered.
    folder = await create_folder(pymap.port)
    old = datetime.now(UTC) - timedelta(days=400)
    for n in range(1, 4):
        await append(pymap.port, folder, mail(n), arrived=old)
    await append(pymap.port, folder, mail(4))
    host = FakeHost()
    config = make_config(tmp_path, pymap.port, smtp.port, folder)
    first = await start(channels, config, host)
    await host.wait_for(1)
    await first.stop()
    host.renumber(folder)
    await append(pymap.port, folder, mail(5))  # new meanwhile: still handled
    await start(channels, config, host)
    await host.wait_for(2)
    await append(pymap.port, folder, mail(6))
    await host.wait_for(3)
    assert [mail_id(m.message_id) for m in host.delivered] == [
        "<m4@example.org>",
        "<m5@example.org>",
        "<m6@example.org>",
    ]


async def test_a_folder_read_before_the_backlog_date_was_kept_gets_one(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    # A folder an older version read has no backlog date: the first sync of this one
    # gives it the day before, so that a later renumbering leaves what is older alone.
    folder = await create_folder(pymap.port)
    host = FakeHost()
    config = make_config(tmp_path, pymap.port, smtp.port, folder)
    first = await start(channels, config, host)
    await first.stop()
    del host.cursors[("email", f"{folder}:backlog_before")]
    await append(pymap.port, folder, mail(1), arrived=datetime.now(UTC) - timedelta(days=30))
    await start(channels, config, host)  # delivers it: it came after the cursor
    await host.wait_for(1)
    assert re.fullmatch(
        r"\d{1,2}-[A-Z][a-z]{2}-\d{4}", host.cursors[("email", f"{folder}:backlog_before")]
    )


def expunged_elsewhere(command: str, uid: int) -> Any:
    """What Dovecot and Cyrus answer when another client expunged ``uid`` after our
    SEARCH: ``UID <command> <uid>`` refused with RFC 5530's ``NO [EXPUNGEISSUED]``
    (pymap never sends it: the proxy answers in its place)."""
    command_line = re.compile(rb"^(\S+) UID %s %d " % (command.encode(), uid), re.IGNORECASE)

    def answer(data: bytes) -> bytes | None:
        found = command_line.match(data)
        if found is None:
            return None
        return (
            found.group(1)
            + b" NO [EXPUNGEISSUED] Some of the requested messages no longer exist\r\n"
        )

    return answer


async def expunged_behind_a_proxy(pymap: PymapServer, command: str) -> tuple[str, Proxy]:
    """A new folder behind a proxy that refuses our ``UID <command>`` of mail 101 as
    Dovecot does when another client has expunged it."""
    folder = await create_folder(pymap.port)
    proxy = Proxy(pymap.port)
    proxy.answer = expunged_elsewhere(command, 101)
    await proxy.start()
    return folder, proxy


async def test_a_fetch_refused_with_expungeissued_is_a_mail_gone_not_a_broken_session(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The owner's phone deleted mail 101 between our SEARCH and FETCH; Dovecot refused
    # the FETCH with NO [EXPUNGEISSUED]. It was taken for a broken session: reconnect,
    # fetch again, five times, then "passed over" and retried every hour, for ever.
    folder, proxy = await expunged_behind_a_proxy(pymap, "fetch")
    try:
        host = FakeHost()
        config = make_config(tmp_path, proxy.port, smtp.port, folder, imap={"poll_interval": 0.2})
        with caplog.at_level(logging.INFO, logger="my_agent.email"):
            channel = await start(channels, config, host)
            await append(pymap.port, folder, mail(1))
            await append(pymap.port, folder, mail(2))
            channel.poke()
            await host.wait_for(1)
            await append(pymap.port, folder, mail(3))  # nothing held up behind it
            got = await host.wait_for(2)
        assert [mail_id(m.message_id) for m in got] == ["<m2@example.org>", "<m3@example.org>"]
        assert proxy.connections == 1  # no reconnect
        await host.wait_cursor(f"{folder}:last_uid", lambda uid: uid == "103")
        assert '"mails": {}' in host.cursors[("email", f"{folder}:unfetched")]
        assert channel.problems() == []
        gone: list[Any] = [r for r in caplog.records if "is gone" in r.getMessage()]
        assert [r.args[0] for r in gone] == [101]
    finally:
        await proxy.stop()


@pytest.mark.parametrize("command, processed", [("store", None), ("move", "Processed")])
async def test_a_mark_refused_with_expungeissued_is_no_reason_to_deliver_again(
    pymap: PymapServer,
    smtp: SmtpServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    caplog: pytest.LogCaptureFixture,
    command: str,
    processed: str | None,
) -> None:
    # Delivered, then deleted by another client before our \Seen (or MOVE): refused
    # with NO [EXPUNGEISSUED], it ended the session, and the mail was fetched again.
    folder, proxy = await expunged_behind_a_proxy(pymap, command)
    try:
        host = FakeHost()
        imap = {"poll_interval": 0.2, "processed_folder": processed}
        config = make_config(tmp_path, proxy.port, smtp.port, folder, imap=imap)
        with caplog.at_level(logging.INFO, logger="my_agent.email"):
            channel = await start(channels, config, host)
            await append(pymap.port, folder, mail(1))
            channel.poke()
            await host.wait_cursor(f"{folder}:last_uid", lambda uid: uid == "101")
            await append(pymap.port, folder, mail(2))
            got = await host.wait_for(2)
        assert [mail_id(m.message_id) for m in got] == ["<m1@example.org>", "<m2@example.org>"]
        assert proxy.connections == 1
        unmarked: list[Any] = [r for r in caplog.records if "nothing to mark" in r.getMessage()]
        assert [r.args[0] for r in unmarked] == [101]
    finally:
        await proxy.stop()
