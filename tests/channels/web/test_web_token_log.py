"""The login token is logged on a terminal only: under systemd the log is the journal,
kept and readable by every member of its group, and the token opens the dashboard."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import aiohttp
import pytest

from channels.web import server
from tests.channels.web.conftest import start_stack, stop_stack


@pytest.mark.parametrize("terminal", [True, False])
async def test_the_token_is_logged_on_a_terminal_only(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    terminal: bool,
) -> None:
    monkeypatch.setattr(server, "_stderr_is_terminal", lambda: terminal)
    with caplog.at_level(logging.WARNING, logger="my_agent.web"):
        stack = await start_stack(tmp_path / "data")
        try:
            token = stack.channel.token
            said = [r.getMessage() for r in caplog.records if "dashboard at" in r.getMessage()]
        finally:
            await stop_stack(stack)
    assert len(said) == 1 and str(stack.channel.token_path) in said[0]
    assert [r.levelname for r in caplog.records if "dashboard at" in r.getMessage()] == ["WARNING"]
    assert (token in said[0]) is terminal


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
async def test_the_logged_link_opens_on_an_ipv6_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: with channels.web.host "::1" the log said "dashboard at http://::1:4321/
    # ... (or open http://::1:4321/login#token=...)": no browser opens that address.
    monkeypatch.setattr(server, "_stderr_is_terminal", lambda: True)
    with caplog.at_level(logging.WARNING, logger="my_agent.web"):
        stack = await start_stack(tmp_path / "data", host="::1")
        try:
            said = next(r.getMessage() for r in caplog.records if "dashboard at" in r.getMessage())
            link = re.search(r"open (\S+)/login#token=(\S+)\)", said)
            assert link is not None, said
            assert link.group(1) == f"http://[::1]:{stack.channel.port}"
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
                async with http.post(
                    f"{link.group(1)}/login", json={"token": link.group(2)}
                ) as resp:
                    assert resp.status == 200, await resp.text()
                async with http.get(f"{link.group(1)}/api/conversations") as resp:
                    assert resp.status == 200, await resp.text()
        finally:
            await stop_stack(stack)
