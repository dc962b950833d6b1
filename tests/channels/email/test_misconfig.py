"""IMAP settings that do not fit the server (channels/email/misconfig.py): a login
refused, TLS spoken to a plain server, STARTTLS not offered, a folder that does not
exist. Before session 24 the channel retried them with backoff and a warning in the
log, for ever: the owner learnt of it when the assistant stopped answering mail. Now
the host's ``alert_owner`` is told at the third attempt in a row (and the channel's
status lists it), cleared once a connection works; an outage is no such problem."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot.config.channels import ImapConfig
from bot.config.model import AppConfig
from bot.status_reads import stored_channel_problems
from channels.email.adapter import EmailChannel
from channels.email.imap_wire import LoginRefused
from channels.email.misconfig import IMAP_ALERT, ImapMisconfiguration, imap_trouble
from tests.channels.email.conftest import (
    FakeHost,
    PymapServer,
    SmtpServer,
    create_folder,
)
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import OWNER, Stack, close_stack, open_in_new_folder
from tests.channels.email.test_adapter import make_config


async def test_a_refused_login_is_told_and_cleared_once_fixed(
    pymap: PymapServer, tmp_path: Path, channels: list[EmailChannel]
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    wrong = EmailChannel(
        make_config(tmp_path, pymap.port, 1, folder, imap={"timeout": 2}, password="wrong")
    )
    channels.append(wrong)
    await wrong.start(host)
    problem, *later = await host.wait_alerts(1)
    assert set(later) <= {problem}
    assert problem is not None
    assert "refused the login" in problem and "AUTHENTICATIONFAILED" in problem
    assert "EMAIL_PASSWORD" in problem and f"127.0.0.1:{pymap.port}" in problem
    assert host.alerts[0][:2] == ("email", IMAP_ALERT)
    assert problem in wrong.problems()
    assert not wrong.ready.is_set()
    await wrong.stop()
    told = len(host.alerts)
    # The owner fixes the password and restarts: the problem kept by the last run is
    # cleared at the first login.
    fixed = EmailChannel(make_config(tmp_path, pymap.port, 1, folder))
    channels.append(fixed)
    await fixed.start(host)
    await asyncio.wait_for(fixed.ready.wait(), 60)  # a loaded machine: more than 2 s
    alerts = await host.wait_alerts(told + 1)
    assert alerts[told:] == [None]
    assert fixed.problems() == []


@pytest.mark.parametrize(
    ("imap", "says"),
    [
        ({"security": "ssl"}, "speaks plain text, not TLS"),
        ({"security": "starttls"}, "does not offer STARTTLS"),
        ({"folder": "No such folder"}, "channels.email.imap.folder"),
    ],
)
async def test_tls_and_folder_settings_that_do_not_fit_are_told(
    pymap: PymapServer,
    tmp_path: Path,
    channels: list[EmailChannel],
    imap: dict[str, Any],
    says: str,
) -> None:
    folder = await create_folder(pymap.port)
    host = FakeHost()
    channel = EmailChannel(
        make_config(tmp_path, pymap.port, 1, folder, imap={"timeout": 2, **imap})
    )
    channels.append(channel)
    await channel.start(host)
    problem, *later = await host.wait_alerts(1)
    assert set(later) <= {problem}
    assert problem is not None and says in problem
    assert channel.problems()[0] == problem


async def test_an_unreachable_server_is_no_misconfiguration(
    tmp_path: Path, refused_port: int, channels: list[EmailChannel]
) -> None:
    host = FakeHost()
    channel = EmailChannel(make_config(tmp_path, refused_port, 1, "INBOX", imap={"timeout": 1}))
    channels.append(channel)
    await channel.start(host)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while channel.backoff.attempt < 6:  # six refused connections
        assert loop.time() < deadline, "the channel stopped retrying"
        await asyncio.sleep(0.05)
    assert host.alerts == []
    assert channel.problems() == []


async def test_told_from_the_third_refusal_in_a_row_and_reset_by_a_login() -> None:
    cfg = ImapConfig(host="imap.example.com", port=993)
    host = FakeHost()
    watch = ImapMisconfiguration(cfg)
    refused = LoginRefused("NO [AUTHENTICATIONFAILED] Invalid credentials")
    await watch.failed(host, refused)
    await watch.failed(host, ConnectionRefusedError("down"))  # an outage: not counted
    await watch.failed(host, refused)
    assert host.alerts == [] and watch.problem is None
    await watch.failed(host, refused)
    assert [p for _, _, p in host.alerts] == [watch.problem]
    await watch.failed(host, refused)  # every later attempt reports it (the host dedupes)
    assert len(host.alerts) == 2
    await watch.connected(host)
    assert host.alerts[-1] == ("email", IMAP_ALERT, None) and watch.problem is None
    await watch.connected(host)  # nothing to clear any more
    await watch.failed(host, refused)
    await watch.failed(host, refused)
    assert len(host.alerts) == 3  # counted afresh after the login


def test_a_login_refused_for_now_is_no_misconfiguration() -> None:
    cfg = ImapConfig(host="imap.example.com", port=993)
    assert imap_trouble(LoginRefused("NO [UNAVAILABLE] Maintenance, try later"), cfg) is None
    assert imap_trouble(TimeoutError("no answer"), cfg) is None
    told = imap_trouble(LoginRefused("NO [PRIVACYREQUIRED] Use TLS"), cfg)
    assert told is not None and "security to starttls or ssl" in told


async def test_the_owner_gets_the_alert_by_mail_and_status_names_it(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # The real core: IMAP refuses the login (a wrong imap.username) while SMTP works; the
    # owner is mailed the problem once, and a `my-agent status` with the daemon stopped
    # names it.
    def wrong_user(config: AppConfig) -> None:
        config.channels.email.imap.username = "nobody@example.com"
        config.channels.email.imap.timeout = 2

    _, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks, wrong_user)
    [alert] = await smtp.capture.wait_for(1, timeout=60)
    assert alert["To"] == OWNER and alert["Subject"] == "my-agent alert"
    body = text_of(alert)
    assert "refused the login" in body and "channels.email.imap.username" in body
    assert any("refused the login" in p for p in stack.services.channel_problems()["email"])
    stacks.remove(stack)
    await close_stack(stack)
    [kept] = stored_channel_problems(stack.config.state_path, ["email"])
    assert kept.startswith("email: the IMAP server refused the login")
    assert len(smtp.capture.messages) == 1


def test_the_servers_words_are_quoted_on_one_line_and_bounded() -> None:
    # They go into the owner's alert and the status line: a terminal escape, a line
    # break or a page of text from the server stays out of both.
    import aioimaplib

    from channels.email.imap_wire import MAX_SAID, said

    answer = aioimaplib.Response("NO", [b"\x1b[31m[AUTHENTICATIONFAILED]\r\nNo " + b"x" * 500])
    quoted = said(answer)
    assert quoted.startswith("[31m[AUTHENTICATIONFAILED] No xxx")
    assert len(quoted) == MAX_SAID and quoted.isprintable()
