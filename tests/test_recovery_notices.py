"""What a one-shot command's recovery saves reaches the owner at the daemon's next start,
and ``my-agent reindex`` saves a deleted file's rows before it deletes the index.

Before session 28 ``my-agent conversations`` or ``search`` run while the daemon was
stopped saved a deleted transcript's rows and only logged it on its stderr (the daemon,
finding nothing left to take out, never told the owner), and ``reindex`` deleted the
index with those rows in it, the turns gone for good."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot import cli, exitcodes
from bot.daemon import start_serving
from bot.party_rescue import removed_party_path
from bot.services import open_services
from bot.transcript import parse_lines
from bot.transcript_rescue import removed_copy_path
from tests.conftest import shutdown_services
from tests.ops.loopback import Loopback, base_config, start_daemon
from tests.support import ScriptedBrain
from tests.test_cli import Store, filled_store


@pytest.fixture
def filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """test_cli's small store: two conversations (web, Telegram) and a third party."""
    return filled_store(tmp_path, monkeypatch)


async def _alerts_at_start(config: object) -> list[str]:
    """Start the daemon's serving once (no channel: the alerts go to the dashboard's
    ``notice`` event) and stop; the owner's alerts, all given before start_serving
    returns."""
    services = await open_services(config, brain=ScriptedBrain())  # type: ignore[arg-type]
    notices: list[str] = []

    async def notice(text: str) -> None:
        notices.append(text)

    services.bus.subscribe("notice", notice)
    try:
        await start_serving(services, [])
        return [text for text in notices if "missing at start" in text]
    finally:
        await shutdown_services(services)


def test_a_commands_copy_is_told_at_the_next_daemon_start(
    filled: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    conv_id = filled.ids["web"]
    (filled.config.conversations_dir / f"{conv_id}.jsonl").unlink()
    status, _ = filled.run("conversations", "list", capsys=capsys)
    assert status == 0
    copy = removed_copy_path(filled.config.conversations_dir, conv_id)
    assert copy.is_file()  # the command's recovery saved it
    (alert,) = asyncio.run(_alerts_at_start(filled.config))
    assert alert.startswith("Transcripts missing at start: ")
    assert f"{conv_id}.jsonl was missing" in alert and str(copy) in alert
    assert asyncio.run(_alerts_at_start(filled.config)) == []  # told once


def test_reindex_saves_a_deleted_files_rows_before_it_deletes_the_index(
    filled: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    conv_id = filled.ids["web"]
    party = next(filled.config.external_dir.glob("p*.jsonl"))
    (filled.config.conversations_dir / f"{conv_id}.jsonl").unlink()
    party.unlink()
    status, out = filled.run("reindex", "--json", capsys=capsys)
    assert status == 0
    report = json.loads(out)
    copy = removed_copy_path(filled.config.conversations_dir, conv_id)
    party_copy = removed_party_path(filled.config.external_dir, party.stem)
    turns = parse_lines(copy.read_bytes(), copy.name)
    first = next(t["content"] for t in turns if t["type"] == "turn")
    assert first == "Plan the trip to Porto in May"
    said = parse_lines(party_copy.read_bytes(), party_copy.name)
    assert [m["content"] for m in said if m.get("direction") == "in"] == [
        "Stranger secret: marzipan factory"
    ]
    assert any(str(copy) in w for w in report["warnings"]), report["warnings"]
    assert any(str(party_copy) in w for w in report["warnings"]), report["warnings"]
    alerts = asyncio.run(_alerts_at_start(filled.config))
    assert any(str(copy) in a for a in alerts) and any(str(party_copy) in a for a in alerts)


def test_reindex_leaves_the_index_when_a_copy_cannot_be_written(
    filled: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    conv_id = filled.ids["web"]
    (filled.config.conversations_dir / f"{conv_id}.jsonl").unlink()
    (filled.config.conversations_dir / "removed").write_text("not a directory", encoding="utf-8")
    before = filled.config.index_path.read_bytes()
    capsys.readouterr()
    status = cli.main(["--config", str(filled.config_path), "reindex"])
    assert status == exitcodes.EX_DATADIR
    assert "is left as it is" in capsys.readouterr().err
    assert filled.config.index_path.read_bytes() == before  # not deleted


async def test_the_real_daemon_tells_the_owner_once_of_a_commands_party_copy(
    tmp_path: Path, daemons: list[Any]
) -> None:
    # The real daemon and the command as the owner types them (child processes): a
    # stranger's record deleted while the daemon is stopped, a `conversations list`
    # run meanwhile saves it; the owner hears of it at the next start, and only then.
    config = base_config(tmp_path)
    daemon = await start_daemon(daemons, tmp_path, config)
    data = daemon.data_dir
    async with aiohttp.ClientSession() as session:
        assert await Loopback(daemon, session).post("stranger-1", "the code is 4711", "s1") == 200
    assert await daemon.terminate() == 0
    (record,) = (data / "external").glob("p*.jsonl")
    record.unlink()
    command = [sys.executable, "-m", "bot.cli", "--config", str(daemon.config_path)]
    done = await asyncio.to_thread(
        subprocess.run, [*command, "conversations", "list"], capture_output=True, text=True
    )
    copy = removed_party_path(data / "external", record.stem)
    assert done.returncode == 0 and str(copy) in done.stderr, done.stderr  # said there
    said = parse_lines(copy.read_bytes(), copy.name)
    assert [m["content"] for m in said if m.get("direction") == "in"] == ["the code is 4711"]

    told = []
    for _ in range(2):  # told at the next start (before READY=1), not at the one after
        await daemon.start()
        assert await daemon.terminate() == 0
        # (no channel to the owner here but the loopback: the alert is in the log, and
        # on the dashboard when it runs)
        told.append([line for line in daemon.log().splitlines() if "Party records missing" in line])
    (alert,) = told[0]
    assert str(copy) in alert and "(stranger-1, loopback) was missing" in alert
    assert told[1] == []


async def test_a_state_db_refusing_the_claim_does_not_stop_the_start(tmp_path: Path) -> None:
    # The claim of a notice is a write to state.db: a full disk refusing it raised out of
    # start_serving, and the daemon did not start; now the owner is told all the same.
    from types import SimpleNamespace

    from bot.recovery_notices import tell_saved_copies
    from bot.transcript_rescue import write_copy
    from tests.conftest import make_config

    config = make_config(tmp_path)
    copy = removed_copy_path(config.conversations_dir, "conv-01TEST")
    config.conversations_dir.mkdir(parents=True, exist_ok=True)
    write_copy(copy, [{"type": "meta", "id": "conv-01TEST"}])

    class FullDisk:
        async def run(self, fn: Any) -> Any:
            raise OSError(28, "No space left on device")

    told: list[str] = []

    async def alert_owner(text: str) -> None:
        told.append(text)

    services = SimpleNamespace(config=config, state=FullDisk(), alert_owner=alert_owner)
    await tell_saved_copies(services)  # type: ignore[arg-type]
    (alert,) = told
    assert "conv-01TEST.jsonl was missing" in alert and "the 0 turns" in alert
