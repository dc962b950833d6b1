"""A mail the server would not hand over for a while (a flaky link dropping it, five times
in a row): passed over so that later mail still arrives, retried with growing pauses,
across reconnects and restarts, until it is delivered. Real pymap behind a TCP proxy."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from bot.events import InboundMessage
from channels.email.adapter import EmailChannel
from channels.email.unfetched import FETCH_ATTEMPTS, MAX_PAUSE, Unfetched
from tests.channels.email.conftest import (
    FakeHost,
    Proxy,
    PymapServer,
    SmtpServer,
    append,
    create_folder,
    folder_state,
)
from tests.channels.email.helpers import mail_id
from tests.channels.email.test_adapter import is_seen, mail, make_config


async def _stuck(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, host: FakeHost
) -> tuple[str, int, int, Proxy, EmailChannel]:
    """A folder whose first mail the link drops on every FETCH, its second delivered."""
    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, mail(1, subject="Scans"))
    await append(pymap.port, folder, mail(2, subject="Lunch"))
    bad, good = sorted(await folder_state(pymap.port, folder))
    proxy = Proxy(pymap.port)
    await proxy.start()
    proxy.drop_on = f"FETCH {bad} ".encode()
    channel = EmailChannel(make_config(tmp_path, proxy.port, smtp.port, folder), None)
    await channel.start(host)
    [got] = await host.wait_for(1, timeout=20)
    assert mail_id(got.message_id) == "<m2@example.org>"  # later mail is not held up
    return folder, bad, good, proxy, channel


async def test_a_mail_the_link_keeps_dropping_is_retried_not_skipped(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: after five dropped FETCHes the UID cursor moved past the mail and it
    # was never read again, though the server still held it.
    caplog.set_level(logging.WARNING, logger="my_agent.email")
    host = FakeHost()
    folder, bad, good, proxy, channel = await _stuck(pymap, smtp, tmp_path, host)
    try:
        # The cursor moves past it (after the later mail is marked), its record stays.
        await host.wait_cursor(f"{folder}:last_uid", lambda v: v == str(good))
        record = json.loads(host.cursors[("email", f"{folder}:unfetched")])
        assert record["mails"][str(bad)]["failures"] >= FETCH_ATTEMPTS
        [problem] = channel.problems()  # what `my-agent status` shows
        assert f"uid {bad}" in problem and folder in problem
        assert any(f"mail uid {bad} in {folder}" in r.getMessage() for r in caplog.records)
        assert not is_seen((await folder_state(pymap.port, folder))[bad])
        proxy.drop_on = None  # the link is good again: the next retry gets it
        delivered = await host.wait_for(2, timeout=20)
        assert [mail_id(m.message_id) for m in delivered] == [
            "<m2@example.org>",
            "<m1@example.org>",
        ]
        await host.wait_cursor(f"{folder}:unfetched", lambda v: '"mails": {}' in (v or ""))
        assert channel.problems() == []
    finally:
        await channel.stop()
        await proxy.stop()
    assert is_seen((await folder_state(pymap.port, folder))[bad])


async def test_a_passed_over_mail_is_retried_after_a_restart(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path
) -> None:
    host = FakeHost()  # its cursors are the daemon's state.db
    folder, bad, _, proxy, channel = await _stuck(pymap, smtp, tmp_path, host)
    await channel.stop()
    proxy.drop_on = None
    restarted = EmailChannel(make_config(tmp_path, proxy.port, smtp.port, folder), None)
    try:
        await restarted.start(host)
        delivered = await host.wait_for(2, timeout=20)
        assert mail_id(delivered[1].message_id) == "<m1@example.org>"
        assert delivered[1].metadata["imap"]["uid"] == bad
    finally:
        await restarted.stop()
        await proxy.stop()


async def test_retry_pauses_double_to_an_hour_and_a_renumbering_drops_the_record() -> None:
    now = [1000.0]
    host = FakeHost()
    unfetched = Unfetched(host, "INBOX", 300.0, clock=lambda: now[0])
    await unfetched.load("7")
    await unfetched.failed(103, FETCH_ATTEMPTS)
    assert unfetched.due() == []
    now[0] += 300
    assert unfetched.due() == [103]
    pauses = []
    for _ in range(6):
        before = now[0]
        await unfetched.failed(103, 1)  # after a restart the caller counts from 1 again
        pauses.append(unfetched.entries[103].retry_at - before)
    assert pauses == [600, 1200, 2400, MAX_PAUSE, MAX_PAUSE, MAX_PAUSE]
    assert unfetched.entries[103].failures == FETCH_ATTEMPTS + 6
    # A restart reads it back; a new UIDVALIDITY makes its UIDs meaningless.
    again = Unfetched(host, "INBOX", 300.0, clock=lambda: now[0])
    await again.load("7")
    assert 103 in again and again.problems()
    await again.load("8")
    assert again.entries == {} and again.problems() == []
    await again.done(103)  # gone already: nothing to do


async def test_a_passed_over_mail_is_retried_when_the_clock_was_set_back() -> None:
    """The clock set back a day after a mail was passed over: it is retried now, not
    when the clock catches up with its retry time (a day later)."""
    now = [100_000.0]
    unfetched = Unfetched(FakeHost(), "INBOX", 300.0, clock=lambda: now[0])
    await unfetched.load("7")
    await unfetched.failed(103, FETCH_ATTEMPTS)
    await unfetched.failed(104, FETCH_ATTEMPTS + 10)  # the longest pause
    assert unfetched.due() == []
    now[0] -= 86400
    assert unfetched.due() == [103, 104]


async def test_status_shows_a_passed_over_mail_while_the_daemon_is_stopped(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path
) -> None:
    # Regression: the daemon's status line names a mail the server would not hand over,
    # but with the daemon stopped `my-agent status` said nothing of it, though its record
    # is in state.db: the owner checking why a mail was never answered learnt nothing.
    from bot import healthcheck
    from tests.channels.email.test_e2e import close_stack, e2e_config, open_stack, owner_mail

    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, owner_mail(1, "The scans", subject="Scans"))
    await append(pymap.port, folder, owner_mail(2, "Lunch?", subject="Lunch"))
    bad, _ = sorted(await folder_state(pymap.port, folder))
    proxy = Proxy(pymap.port)
    await proxy.start()
    proxy.drop_on = f"FETCH {bad} ".encode()
    config = e2e_config(tmp_path, proxy.port, smtp.port, folder)
    stack = await open_stack(config)  # the real core: its cursors go to state.db
    try:
        await smtp.capture.wait_for(1)  # the later mail is answered
        for _ in range(400):
            raw = await stack.services.router.get_cursor("email", f"{folder}:unfetched")
            if raw and str(bad) in json.loads(raw)["mails"]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the mail was never passed over")
        assert stack.channel.problems()  # what the running daemon's status line says
    finally:
        await close_stack(stack)
        await proxy.stop()
    report = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert report["daemon"]["state"] in ("stopped", "unknown")
    expected = f"email: 1 mail in {folder} the server would not hand over (uid {bad}), retried"
    assert expected in report["problems"], report["problems"]
    assert f"problem:               {expected}" in healthcheck.format_text(report)


class _BuggyHost(FakeHost):
    """A core that fails over one mail with an error that is no outage (a bug)."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison: str | None = poison
        self.crashes = 0

    async def deliver(self, message: InboundMessage) -> None:
        if message.message_ref == self.poison:
            self.crashes += 1
            raise RuntimeError("a bug this one mail triggers")
        await super().deliver(message)


async def test_a_mail_the_core_keeps_failing_over_holds_up_no_later_mail(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path
) -> None:
    # A bug in the core that one mail triggers made every check retry that mail at once
    # and stop there: no later mail was ever read. It is passed over like a mail the
    # server would not hand over: recorded, left unread, retried, delivered once fixed.
    folder = await create_folder(pymap.port)
    await append(pymap.port, folder, mail(1, subject="Poison"))
    await append(pymap.port, folder, mail(2, subject="Lunch"))
    bad, good = sorted(await folder_state(pymap.port, folder))
    host = _BuggyHost("<m1@example.org>")
    channel = EmailChannel(make_config(tmp_path, pymap.port, smtp.port, folder), None)
    await channel.start(host)
    try:
        [got] = await host.wait_for(1, timeout=20)
        assert mail_id(got.message_id) == "<m2@example.org>"
        assert host.crashes == FETCH_ATTEMPTS
        state = await folder_state(pymap.port, folder)
        assert not is_seen(state[bad]) and is_seen(state[good])
        record = json.loads(host.cursors[("email", f"{folder}:unfetched")])
        assert record["mails"][str(bad)]["unstorable"] is True
        assert channel.problems() == [
            f"1 mail in {folder} the assistant failed over (see the log) (uid {bad}), retried"
        ]
        host.poison = None  # the bug fixed: the retry after the pause delivers it
        got2 = await host.wait_for(2, timeout=20)
        assert mail_id(got2[1].message_id) == "<m1@example.org>"
        for _ in range(100):
            if channel.problems() == [] and is_seen((await folder_state(pymap.port, folder))[bad]):
                break
            await asyncio.sleep(0.05)
        assert channel.problems() == []
        assert is_seen((await folder_state(pymap.port, folder))[bad])
    finally:
        await channel.stop()
