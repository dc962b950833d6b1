"""What the commands print on a terminal whose encoding is not UTF-8.

Before session 41 a Latin-1 terminal (LANG=en_US.ISO-8859-1, PYTHONIOENCODING=iso-8859-1)
got exit 70 "internal error: UnicodeEncodeError" part-way through the output when stored
text held a character Latin-1 lacks; now such characters are printed as escapes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot import cli
from bot.cli_common import forgiving_output
from bot.services import open_services
from tests.conftest import RecordingChannel, attach_channel, settle, shutdown_services
from tests.support import REPO, ScriptedBrain, inbound
from tests.test_cli import Store, filled_store

TITLE = "Tokyo trip 東京の天気 — plans"


async def _japanese_title(store: Store) -> None:
    services = await open_services(store.config, brain=ScriptedBrain())
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("Tokyo: 東京の天気は?", sender="424242"))
        await settle(services)
        await services.conversations.rename(store.ids["web"], TITLE)
    finally:
        await shutdown_services(services)


async def _rename(store: Store, title: str) -> None:
    services = await open_services(store.config, brain=ScriptedBrain())
    try:
        await services.conversations.rename(store.ids["web"], title)
    finally:
        await shutdown_services(services)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    s = filled_store(tmp_path, monkeypatch)
    asyncio.run(_japanese_title(s))
    return s


def _latin1_terminal(monkeypatch: pytest.MonkeyPatch) -> tuple[io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    for name, raw in (("stdout", out), ("stderr", err)):
        stream = io.TextIOWrapper(raw, encoding="iso-8859-1", errors="strict", newline="\n")
        monkeypatch.setattr(sys, name, stream)
    return out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["conversations", "list"],
        ["conversations", "show", "WEB"],
        ["search", "Tokyo"],
        ["status"],
        ["conversations", "list", "--json"],
    ],
)
def test_a_latin1_terminal_gets_escapes_not_an_internal_error(
    store: Store, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, err = _latin1_terminal(monkeypatch)
    argv = [store.ids["web"] if a == "WEB" else a for a in argv]
    status = cli.main(["--config", str(store.config_path), *argv])
    sys.stdout.flush()
    sys.stderr.flush()
    said, complaints = out.getvalue().decode("iso-8859-1"), err.getvalue().decode("iso-8859-1")
    assert "internal error" not in complaints, complaints
    assert status in (0, 1), complaints  # status: 1 is "no daemon is running"
    if argv[0] != "status":
        assert "Tokyo" in said
        # the characters Latin-1 has as they are, the others escaped
        assert "\\u6771\\u4eac" in said


def test_json_on_a_latin1_terminal_stays_exact(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # \U0001f600 would be printed "\\U0001f600" by the escapes, which JSON does not read
    asyncio.run(_rename(store, "Tokyo 東京 \U0001f600 café"))
    out, _ = _latin1_terminal(monkeypatch)
    assert cli.main(["--config", str(store.config_path), "conversations", "list", "--json"]) == 0
    sys.stdout.flush()
    listed = json.loads(out.getvalue().decode("iso-8859-1"))
    assert "Tokyo 東京 \U0001f600 café" in [c["title"] for c in listed]


def test_an_error_handler_the_owner_chose_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="replace")
    monkeypatch.setattr(sys, "stdout", stream)
    forgiving_output()
    assert sys.stdout.errors == "replace"


def test_a_pythonioencoding_latin1_process_exits_0(store: Store) -> None:
    exe = Path(sys.executable).with_name("my-agent")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bot.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MY_AGENT_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env.update(PYTHONPATH=str(REPO), PYTHONIOENCODING="iso-8859-1")
    done = subprocess.run(
        [*cmd, "--config", str(store.config_path), "conversations", "show", store.ids["web"]],
        capture_output=True,
        timeout=60,
        env=env,
        cwd=store.root,
    )
    assert done.returncode == 0, done.stderr.decode("iso-8859-1")
    assert "trip \\u6771\\u4eac\\u306e\\u5929\\u6c17 \\u2014 plans" in done.stdout.decode("ascii")
