"""The login token is logged on a terminal only: under systemd the log is the journal,
kept and readable by every member of its group, and the token opens the dashboard."""

from __future__ import annotations

import logging
from pathlib import Path

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
