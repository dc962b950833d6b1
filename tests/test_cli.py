"""``my-agent conversations|search|reindex|status`` on a small store.

The commands run in-process through :func:`bot.cli.main` (each call makes its own event
loop, so these tests are synchronous); one test runs the installed console script."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot import cli, exitcodes
from bot.services import open_services
from tests.conftest import make_config, owner_identities, raw_config, settle, shutdown_services
from tests.support import (
    REPO,
    ScriptedBrain,
    fill_disk,
    garble_page,
    inbound,
    mount_tmpfs,
)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_path = root / "config.yaml"
        self.config_path.write_text(
            yaml.safe_dump(raw_config(root, owner={"identities": owner_identities()})),
            encoding="utf-8",
        )
        self.config = make_config(root, owner={"identities": owner_identities()})
        self.ids: dict[str, str] = {}

    def run(self, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        capsys.readouterr()
        status = cli.main(["--config", str(self.config_path), *args])
        return status, capsys.readouterr().out

    def json(self, *args: str, capsys: pytest.CaptureFixture[str]) -> Any:
        status, out = self.run(*args, "--json", capsys=capsys)
        assert status == 0, out
        return json.loads(out)


async def _fill(store: Store) -> None:
    services = await open_services(store.config, brain=ScriptedBrain())
    try:
        from tests.conftest import RecordingChannel, attach_channel

        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(
            inbound("The sourdough starter needs feeding twice a day", sender="424242")
        )
        await services.router.deliver(
            inbound("Plan the trip to Porto in May", channel="web", sender="owner", chat="web")
        )
        await services.router.deliver(
            inbound("Stranger secret: marzipan factory", sender="31337", sender_name="Mallory")
        )
        await settle(services)
        for rec in await services.conversations.list():
            store.ids[rec.channel] = rec.id
        await services.conversations.rename(store.ids["web"], "Porto trip")
    finally:
        await shutdown_services(services)


def filled_store(root: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A small store in ``root``: two conversations (Telegram, web) and a third party."""
    for var in ("ANTHROPIC_API_KEY", "MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    s = Store(root)
    asyncio.run(_fill(s))
    return s


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    return filled_store(tmp_path, monkeypatch)


def test_conversations_list(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    listed = store.json("conversations", "list", capsys=capsys)
    assert sorted(c["channel"] for c in listed) == ["telegram", "web"]
    by_channel = {c["channel"]: c for c in listed}
    assert by_channel["web"]["title"] == "Porto trip"
    assert by_channel["telegram"]["pinned"] is True
    assert by_channel["telegram"]["turnCount"] == 1
    for meta in listed:
        assert set(meta) >= {"id", "channel", "title", "topics", "created", "updated", "turnCount"}
    # The stranger wrote too, but never shows up here (nor in the index counts).
    assert "marzipan" not in json.dumps(listed) and "Mallory" not in json.dumps(listed)
    telegram_only = store.json("conversations", "list", "--channel", "telegram", capsys=capsys)
    assert [c["id"] for c in telegram_only] == [store.ids["telegram"]]
    status, text = store.run("conversations", "list", capsys=capsys)
    assert status == 0
    assert store.ids["web"] in text and "Porto trip" in text and "marzipan" not in text


def test_conversations_show(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    shown = store.json("conversations", "show", store.ids["telegram"], capsys=capsys)
    assert shown["conversation"]["id"] == store.ids["telegram"]
    lines = shown["lines"]
    assert lines[0]["type"] == "meta"
    assert [(t["role"], t["turnNumber"]) for t in lines if t["type"] == "turn"] == [
        ("user", 1),
        ("assistant", 1),
    ]
    path = store.config.conversations_dir / f"{store.ids['telegram']}.jsonl"
    assert lines == [json.loads(raw) for raw in path.read_text().splitlines()]
    status, text = store.run("conversations", "show", store.ids["web"], capsys=capsys)
    assert status == 0 and "Plan the trip to Porto" in text and "Porto trip" in text
    status, _ = store.run("conversations", "show", "conv-01HQXK5J7G8M3N4P5R6S7T8V9W", capsys=capsys)
    assert status == 1
    # Usage errors exit 64 as README's table says (regression: argparse's own 2).
    for argv in (["conversations", "show"], ["bogus"], ["search"], ["search", "x", "--limit", "z"]):
        with pytest.raises(SystemExit) as stop:
            cli.main(["--config", str(store.config_path), *argv])
        assert stop.value.code == exitcodes.EX_USAGE, argv


def test_search(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    page = store.json("search", "sourdough feeding", capsys=capsys)
    assert [r["conversation_id"] for r in page["results"]] == [store.ids["telegram"]]
    assert "sourdough" in page["results"][0]["snippet"].lower()
    page = store.json("search", "Porto", "--channel", "telegram", capsys=capsys)
    assert page["results"] == []
    page = store.json("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    assert len(page["results"]) == 1
    assert store.json("search", "marzipan", capsys=capsys)["results"] == []
    assert store.json("search", '"unbalanced (quote* NEAR', capsys=capsys)["results"] == []
    status, text = store.run("search", "trip", capsys=capsys)
    assert status == 0 and store.ids["web"] in text
    # an untitled conversation is named as the dashboard names it (it said "Untitled")
    status, text = store.run("search", "sourdough feeding", capsys=capsys)
    assert status == 0 and "New conversation" in text and "Untitled" not in text


def test_search_pages_dates_and_channel_case(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    first = store.json("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    assert first["next_cursor"]  # printed, and now usable: the second page is the other one
    rest = store.json(
        "search",
        "Porto OR sourdough",
        "--limit",
        "1",
        "--cursor",
        first["next_cursor"],
        capsys=capsys,
    )
    assert {r["conversation_id"] for r in first["results"] + rest["results"]} == {
        store.ids["web"],
        store.ids["telegram"],
    }
    # The plain listing says how to get the next page (it used to print no cursor).
    status, text = store.run("search", "Porto OR sourdough", "--limit", "1", capsys=capsys)
    shown = f"1 of 2 matches shown; next page: --cursor {first['next_cursor']}"
    assert status == 0 and shown in text
    # `conversations list --channel` ignores case too (it found nothing for "WEB").
    listed = store.json("conversations", "list", "--channel", "WEB", capsys=capsys)
    assert store.ids["web"] in json.dumps(listed)
    page = store.json("search", "sourdough", "--channel", "Telegram", capsys=capsys)
    assert [r["conversation_id"] for r in page["results"]] == [store.ids["telegram"]]
    assert store.json("search", "sourdough", "--to", "2000-01-01", capsys=capsys)["results"] == []
    assert store.json("search", "sourdough", "--from", "2000-01-01", capsys=capsys)["results"]
    # A date that is not one is refused by name instead of silently matching nothing.
    status = cli.main(
        ["--config", str(store.config_path), "search", "sourdough", "--from", "2026-13-01"]
    )
    assert status == exitcodes.EX_USAGE
    # named as typed (it said "date_from", which is no option of this command)
    assert "--from is not an ISO date" in capsys.readouterr().err
    status = cli.main(
        [
            "--config",
            str(store.config_path),
            "search",
            "x",
            "--from",
            "2026-03-02",
            "--to",
            "2026-03-01",
        ]
    )
    assert status == exitcodes.EX_USAGE
    assert "--from 2026-03-02 is after --to 2026-03-01" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["conversations", "list", "--channel", "telgram"], ["search", "Porto", "--channel", "mail"]],
)
def test_an_unknown_channel_is_a_usage_error(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: a misspelt channel listed nothing and exited 0, as if it were empty.
    capsys.readouterr()
    assert cli.main(["--config", str(store.config_path), *argv]) == exitcodes.EX_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    # Every channel --channel takes, as --help lists them (before session 41 loopback,
    # accepted and in the help, was left out here).
    said = f"--channel {argv[-1]!r} is not a channel (one of web, telegram, email, loopback)\n"
    assert said in captured.err
    for action in cli.build_parser().conversations._actions:  # type: ignore[union-attr]
        if "--channel" in action.option_strings:
            assert "(web, telegram, email, loopback)" in (action.help or "")
    assert cli.main(["--config", str(store.config_path), *argv[:-1], "loopback"]) == 0


def _new_york_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """A config file (and its validated config) for an owner in New York, with none of
    the developer's environment."""
    for var in ("ANTHROPIC_API_KEY", "MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    owner = {"identities": owner_identities(), "timezone": "America/New_York"}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw_config(tmp_path, owner=owner)), encoding="utf-8")
    return config_path, make_config(tmp_path, owner=owner)


def test_search_dates_are_the_owners_calendar_days(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `my-agent search` printed the UTC day of each result and read --from
    # and --to as UTC days, unlike the recall tool (owner.timezone): in New York an
    # evening conversation (20:30, the next day in UTC) was listed as the day after and
    # was not found with --from/--to naming its day.
    config_path, config = _new_york_owner(tmp_path, monkeypatch)

    async def fill() -> dict[str, str]:
        services = await open_services(config, brain=ScriptedBrain())
        try:
            ids = {}
            for name, ts in (
                ("evening", "2999-03-02T01:30:00.000Z"),  # 1 March, 20:30 in New York
                ("night", "2999-03-02T05:30:00.000Z"),  # 2 March, 00:30 in New York
            ):
                rec = await services.conversations.create("web")
                text = f"the {name} chat about kayaks"
                await services.conversations.append_turn(rec.id, "user", text, timestamp=ts)
                ids[name] = rec.id
            return ids
        finally:
            await shutdown_services(services)

    ids = asyncio.run(fill())

    def search(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        status = cli.main(["--config", str(config_path), "search", "kayaks", *args])
        captured = capsys.readouterr()
        return status, captured.out + captured.err

    status, out = search("--from", "2999-03-01", "--to", "2999-03-01")
    assert status == 0
    assert ids["evening"] in out and ids["night"] not in out
    assert "2999-03-01)" in out and "2999-03-02" not in out
    status, out = search("--from", "2999-03-02")
    assert ids["night"] in out and ids["evening"] not in out
    assert "2999-03-02)" in out
    # Reversed by one day it is still refused, naming the dates as typed.
    status, out = search("--from", "2999-03-02", "--to", "2999-03-01")
    assert status == exitcodes.EX_USAGE
    assert "--from 2999-03-02 is after --to 2999-03-01" in out


def test_reindex(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    before = store.json("conversations", "list", capsys=capsys)
    search_before = store.json("search", "trip sourdough", capsys=capsys)
    status, out = store.run("reindex", "--json", capsys=capsys)
    assert status == 0
    report = json.loads(out)
    assert report["registered"] == 2 and report["conversations"] == 2
    assert report["parties"] == 1 and report["turns"] == 4
    assert report["seconds"] >= 0 and isinstance(report["warnings"], list)
    assert store.json("conversations", "list", capsys=capsys) == before
    assert store.json("search", "trip sourdough", capsys=capsys) == search_before


def test_reindex_names_the_transcript_lines_it_could_not_read(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression (session 27): a line that is not JSON was left out with a log line among
    # the others on stderr; the report counted the turns indexed as if nothing was missing.
    path = store.config.conversations_dir / f"{store.ids['web']}.jsonl"
    raw = path.read_bytes().splitlines(keepends=True)
    turn = next(i for i, line in enumerate(raw) if b'"type":"turn"' in line)
    raw[turn] = raw[turn].replace(b'"content":"', b'"content":', 1)
    path.write_bytes(b"".join(raw))
    status, out = store.run("reindex", capsys=capsys)
    assert status == 0
    where = f"{path.name}:{turn + 1}"
    assert "Warning: 1 transcript line(s) could not be read and are not in the index" in out
    assert out.rstrip().endswith(where) or f": {where}\n" in out, out
    report = store.json("reindex", capsys=capsys)
    assert report["skippedLines"] == [where]


def test_reindex_says_what_it_rebuilt_in_words(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `my-agent reindex` printed its report as one line of raw JSON, where
    # the other commands print words and keep JSON for --json.
    status, out = store.run("reindex", capsys=capsys)
    assert status == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"Rebuilt {store.config.index_path} from the transcripts in ")
    assert "  2 conversations, 4 messages indexed" in lines
    assert "  1 third party kept" in lines
    assert not out.lstrip().startswith("{")
    # no local model in the tests: said in words, not only in the log
    assert any(line.startswith("Warning: vectors not rebuilt here") for line in lines), out
    # Regression: stderr had INFO lines (the databases created, the recovery's dict)
    # and the vectors warning a second time, as a log line
    capsys.readouterr()
    assert cli.main(["--config", str(store.config_path), "reindex"]) == 0
    captured = capsys.readouterr()
    assert "vectors not rebuilt" in captured.out
    assert "INFO" not in captured.err and "recovery" not in captured.err, captured.err
    assert "vectors not rebuilt" not in captured.err, captured.err
    assert "embedding model" not in captured.err, captured.err  # the reason is in out


def test_status(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = store.run("status", "--json", capsys=capsys)
    report = json.loads(out)
    assert report["counts"]["conversations"] == 2
    assert report["counts"]["by_channel"] == {"telegram": 1, "web": 1}
    assert report["counts"]["turns"] == 4
    assert report["counts"]["external_parties"] == 1
    assert report["index"]["ok"] is True
    # No daemon is running: that is the (only) problem reported, hence exit status 1.
    assert report["daemon"]["state"] != "ready"
    assert status == report["exit_code"] == 1
    assert all("daemon" in p for p in report["problems"])

    # A transcript line the index has not seen yet shows as bytes to index (caught up
    # at the next start).
    path = store.config.conversations_dir / f"{store.ids['web']}.jsonl"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "turn", "role": "user", "content": "x", "turnNumber": 2,
                             "timestamp": "2026-01-01T00:00:00.000Z"}) + "\n")  # fmt: skip
    status, out = store.run("status", "--json", capsys=capsys)
    report = json.loads(out)
    assert report["index"]["unindexed_bytes"] > 0
    assert report["index"]["transcript_turns"] == report["index"]["index_turns"] + 1


def test_installed_console_script(store: Store) -> None:
    exe = Path(sys.executable).with_name("my-agent")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bot.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MY_AGENT_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [*cmd, "--config", str(store.config_path), "conversations", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=store.root,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(c["id"] for c in json.loads(done.stdout)) == sorted(store.ids.values())


@pytest.mark.parametrize(
    "argv", [["conversations", "list", "--json"], ["search", "sourdough"], ["status", "--json"]]
)
def test_output_read_by_head_ends_quietly(store: Store, argv: list[str]) -> None:
    # Regression: `my-agent status --json | head` ended in a BrokenPipeError traceback
    # (exit 1, the same as "a problem is listed"); now exit 141 like cat, and no noise.
    exe = Path(sys.executable).with_name("my-agent")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bot.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MY_AGENT_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = str(REPO)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run(
            [*cmd, "--config", str(store.config_path), *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=env,
            cwd=store.root,
        )
    finally:
        os.close(write_end)
    assert done.returncode == exitcodes.EX_PIPE, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    "argv", [["conversations", "show", "conv-\udcff"], ["search", "sour\udcffdough"]]
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(
    store: Store, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: bytes that are not UTF-8 on the command line (a pasted binary id)
    # reached SQLite as lone surrogates: `conversations show` ended in a
    # UnicodeEncodeError traceback, `search` in "codec can't encode character".
    with pytest.raises(SystemExit) as done:
        cli.main(["--config", str(store.config_path), *argv])
    assert done.value.code == exitcodes.EX_USAGE
    assert "is not valid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("limit", ["0", "-1", "ten", "1000001", "9" * 20, "9" * 5000])
@pytest.mark.parametrize("argv", [["conversations", "list"], ["search", "sourdough"]])
def test_a_limit_out_of_range_is_a_usage_error(
    store: Store, argv: list[str], limit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `--limit 0` listed nothing, `--limit -1` listed every conversation
    # (SQLite's LIMIT -1) and search gave its default page for both, all with exit 0.
    # Regression (session 41): `--limit 99999999999999999999` reached SQLite, exit 70
    # "internal error: OverflowError"; 5,000 digits are beyond Python's own int().
    with pytest.raises(SystemExit) as done:
        cli.main(["--config", str(store.config_path), *argv, "--limit", limit])
    assert done.value.code == exitcodes.EX_USAGE
    said = capsys.readouterr().err
    assert "--limit" in said and len(said) < 1000
    if limit == "1000001":
        assert "at most 1000000" in said


def test_the_largest_limit_lists_everything(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = store.json("conversations", "list", "--limit", "1000000", capsys=capsys)
    assert len(listed) == 2


@pytest.mark.parametrize("name", cli.BENCHMARKS)
def test_every_benchmark_parses_its_arguments(name: str) -> None:
    """Regression: a benchmark defining --config itself clashed with the CLI's own."""
    module, parser = cli.bench_parser(name)
    positional = {"locomo": ["locomo.json"], "ranker": ["locomo.json"]}.get(name, [])
    args = parser.parse_args(["--json", *positional])
    assert args.json is True
    assert hasattr(module, "run")


@pytest.mark.parametrize("name", cli.BENCHMARKS)
def test_benchmark_receives_the_config_file(name: str) -> None:
    """Regression: ``bench locomo PATH --config FILE`` ran with the default config (the
    top-level parser takes --config, the module's own option reset it to None)."""
    args, rest = cli.build_parser().parse_known_args(
        ["bench", name, "--json", "--config", "/tmp/some-config.yaml"]
    )
    _, parser = cli.bench_parser(args.name, args.config)
    positional = {"locomo": ["locomo.json"], "ranker": ["locomo.json"]}.get(name, [])
    assert str(parser.parse_args([*rest, *positional]).config) == "/tmp/some-config.yaml"
    assert cli.bench_parser(name)[1].parse_args(positional).config is None


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_bench_help_shows_the_benchmarks_own_options(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``my-agent bench search --help`` printed the generic ``bench`` usage
    (the sub-command parser answered the flag itself), so a benchmark's options
    (``--conversations``, ``--db``, ...) could only be found in the source."""
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "search", flag])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "my-agent bench search" in out
    assert "--conversations" in out


def test_bench_help_without_a_name_lists_the_benchmarks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "--help"])
    assert done.value.code == 0
    assert "locomo" in capsys.readouterr().out


def test_bench_without_a_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["bench"])
    assert done.value.code == exitcodes.EX_USAGE


def test_reindex_refuses_while_a_daemon_holds_the_data_directory(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot import exitcodes
    from bot.transcript import TranscriptStore

    index = store.config.index_path
    daemon_store = TranscriptStore(store.config.conversations_dir)
    daemon_store.open(exclusive=True)  # what a running daemon holds
    try:
        status, _ = store.run("reindex", capsys=capsys)
        assert status == exitcodes.EX_TEMPFAIL
        assert index.exists()  # nothing was deleted under the "daemon"
    finally:
        daemon_store.close()
    status, _ = store.run("reindex", capsys=capsys)
    assert status == 0


def test_search_never_downloads_a_model(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a local model, `my-agent search` answers keyword-only at once instead of
    waiting for fastembed's download retries (about 40 s on an offline machine)."""
    from bot.embedding import ENV_MODEL_PATH

    monkeypatch.delenv(ENV_MODEL_PATH, raising=False)
    calls: list[dict[str, Any]] = []

    def factory(_cls: object, kwargs: dict[str, Any]) -> object:
        calls.append(dict(kwargs))
        raise ValueError("Could not load model from any source.")

    monkeypatch.setattr("bot.embedding._without_spinning", factory)
    raw = yaml.safe_load(store.config_path.read_text(encoding="utf-8"))
    raw["embedding"] = {"enabled": True}
    store.config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    # an empty model cache: keyword-only without asking fastembed at all (bot.embedding)
    page = store.json("search", "sourdough feeding", capsys=capsys)
    assert page["method"] == "keyword" and calls == []
    # something in the cache: fastembed is asked, for local files only
    (store.config.model_cache_dir / "models--someone--another-model").mkdir(parents=True)
    page = store.json("search", "sourdough feeding", capsys=capsys)
    assert page["method"] == "keyword"
    assert [r["conversation_id"] for r in page["results"]] == [store.ids["telegram"]]
    assert [c.get("local_files_only") for c in calls] == [True]


def test_reading_commands_never_create_a_data_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: a wrong data_dir (a typo, the wrong config) answered "no conversations"
    # and left a new empty store behind, as if the history were gone.
    missing = tmp_path / "nowhere"
    config_path = tmp_path / "config.yaml"
    raw = raw_config(tmp_path)
    raw["data_dir"] = str(missing)
    config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    for argv in (["conversations", "list"], ["search", "anything"], ["reindex"]):
        assert cli.main(["--config", str(config_path), *argv]) == exitcodes.EX_DATADIR, argv
        assert "does not exist" in capsys.readouterr().err
    assert not missing.exists()


@pytest.mark.parametrize("denied_at", ["stat", "access"])
def test_a_data_directory_this_user_cannot_read_is_not_called_missing(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    denied_at: str,
) -> None:
    # Regression: `my-agent status` without sudo next to the system unit (the state
    # directory under /var/lib/private, 0700) said "data directory ... does not exist",
    # as if the history were gone; `reindex` went on to delete the index (a traceback).
    # Root reads everything, so the denial is simulated where the check asks the kernel.
    data_dir = store.config.data_dir
    if denied_at == "stat":
        real_stat = Path.stat

        def stat(self: Path, **kwargs: Any) -> os.stat_result:
            if self == data_dir:
                raise PermissionError(13, "Permission denied", str(self))
            return real_stat(self, **kwargs)

        monkeypatch.setattr(Path, "stat", stat)
    else:
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode, **kw: Path(p) != data_dir and real_access(p, mode, **kw)
        )
    for argv in (["status"], ["conversations", "list"], ["search", "sourdough"], ["reindex"]):
        status = cli.main(["--config", str(store.config_path), *argv])
        said = "".join(capsys.readouterr())
        assert status == exitcodes.EX_DATADIR, argv
        assert "permission denied" in said and "does not exist" not in said, argv
    assert store.config.index_path.is_file()  # reindex deleted nothing


def test_a_read_only_data_directory_is_named_with_what_to_do(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a snapshot or backup mounted read-only got "data directory ... is not
    # usable: [Errno 30] Read-only file system: '.../.write-test'" from `search`: it did
    # not say that commands write the index, nor what to do. Root writes anywhere, so the
    # file system's refusal is simulated where the check writes.
    real_write = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name == ".write-test":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    # (reindex too: it failed in the index's delete, "internal error", exit 70)
    for argv in (["conversations", "list"], ["search", "sourdough"], ["reindex"]):
        status = cli.main(["--config", str(store.config_path), *argv])
        err = capsys.readouterr().err
        assert status == exitcodes.EX_DATADIR, argv
        assert "read-only file system" in err and "copy the directory" in err, argv
    assert store.config.index_path.is_file()  # reindex deleted nothing


def _disk_full_at_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data directory's write probe refused for lack of space, as on a full disk
    (root writes on a disk's reserved blocks: the refusal is simulated where the check
    writes; what else is written shows in the files, which must stay as they are)."""
    real_write = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name == ".write-test":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)


def _files(store: Store) -> dict[str, bytes]:
    """The store's files and what they hold: transcripts, party records, databases.
    (Not the journals, whose files a command opening them starts afresh in place.)"""
    data = store.config.data_dir
    return {
        str(p.relative_to(data)): p.read_bytes()
        for p in sorted(data.rglob("*"))
        if p.is_file() and p.name != "maintenance.lock" and p.parent.name != "journal"
    }


def test_reading_commands_work_on_a_full_disk_when_nothing_is_to_be_written(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 42): `search` and `conversations` exited 73 on a full disk
    # ("not usable: No space left on device") although the index was current and they
    # had nothing to write: the write probe refused them. They read the store as it is.
    _disk_full_at_the_probe(monkeypatch)
    before = _files(store)
    status, text = store.run("conversations", "list", capsys=capsys)
    assert status == 0 and "Porto trip" in text and store.ids["telegram"] in text
    status, text = store.run("conversations", "show", store.ids["web"], capsys=capsys)
    assert status == 0 and "Porto trip" in text
    status, text = store.run("search", "sourdough", capsys=capsys)
    assert status == 0 and store.ids["telegram"] in text
    assert _files(store) == before  # nothing written (no -wal, no -shm either)
    # reindex writes a new index: refused as before, saying why
    assert cli.main(["--config", str(store.config_path), "reindex"]) == exitcodes.EX_DATADIR
    err = capsys.readouterr().err
    assert "is full" in err and "free space" in err, err
    assert _files(store) == before


def test_reading_commands_on_a_real_full_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same on a file system filled to its last byte: the databases, closed (no -wal,
    # no -shm), are read without the -shm file a read-only open would have to create.
    data = tmp_path / "data"
    mount_tmpfs(data, "8m")
    try:
        store = filled_store(tmp_path, monkeypatch)
        filler = fill_disk(data)
        for argv in (["conversations", "list"], ["search", "sourdough"]):
            status, text = store.run(*argv, capsys=capsys)
            assert status == 0 and store.ids["telegram"] in text, argv
        assert not list(data.rglob("*-shm")) and not (data / ".write-test").exists()
        assert cli.main(["--config", str(store.config_path), "reindex"]) == exitcodes.EX_DATADIR
        assert "is full" in capsys.readouterr().err
        filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)


def test_a_reading_command_on_a_full_disk_says_when_the_index_must_be_written(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A turn the index has not got (written while the daemon was stopped short): it must
    # be caught up, a write, before anything is read; exit 73, saying so.
    path = store.config.conversations_dir / f"{store.ids['telegram']}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    last = json.loads(next(x for x in reversed(lines) if json.loads(x).get("type") == "turn"))
    extra = {**last, "turnNumber": last["turnNumber"] + 1, "content": "feed it at noon"}
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(extra) + "\n")
    _disk_full_at_the_probe(monkeypatch)
    before = _files(store)
    for argv in (["conversations", "list"], ["search", "sourdough"]):
        status = cli.main(["--config", str(store.config_path), *argv])
        err = capsys.readouterr().err
        assert status == exitcodes.EX_DATADIR, argv
        assert "is full, and the index must be written before it can be read" in err, err
        assert "free space" in err
    assert _files(store) == before
    # with room again, it is caught up and read
    monkeypatch.undo()
    status, text = store.run("search", "noon", capsys=capsys)
    assert status == 0 and store.ids["telegram"] in text


@pytest.mark.parametrize("damage", ["newer", "garbage", "empty"])
def test_a_reindex_refused_by_state_db_deletes_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    # Regression (session 39): reindex deleted conversations.db, then the services
    # refused state.db (a newer version's, damaged, 0 bytes): exit 74 saying "the file is
    # left untouched", and the index, its vectors and page checks were gone all the same.
    from bot.schema import STATE_MIGRATIONS
    from tests.sqlite_driver import sqlite3

    state = store.config.state_path
    if damage == "newer":
        conn = sqlite3.connect(state)
        conn.execute("PRAGMA user_version=999")
        conn.close()
        said = f"schema version 999, newer than this my-agent knows ({len(STATE_MIGRATIONS)})"
    elif damage == "garbage":
        state.write_bytes(b"not a database, " * 512)
        said = f"cannot open {state}"
    else:
        state.write_bytes(b"")
        said = str(state)
    before = store.config.index_path.read_bytes()
    capsys.readouterr()
    assert cli.main(["--config", str(store.config_path), "reindex"]) == exitcodes.EX_DATABASE
    err = capsys.readouterr().err
    assert said in err and f"{store.config.index_path} is left as it is" in err, err
    assert store.config.index_path.read_bytes() == before


def test_a_rebuild_that_fails_puts_the_old_index_back(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 40): reindex deleted conversations.db before the rebuild; a
    # rebuild that then failed (a migration, a full disk, Ctrl-C) left no index at all,
    # its vectors and page checks with it. The old one is set aside until it succeeds.
    from bot import cli_reindex
    from bot.index_files import aside_path

    index = store.config.index_path
    before = index.read_bytes()

    async def broken(services: object) -> dict[str, object]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_reindex, "rebuild", broken)
    capsys.readouterr()
    status = cli.main(["--config", str(store.config_path), "reindex"])
    assert status == exitcodes.EX_SOFTWARE
    err = capsys.readouterr().err
    assert f"{index} is back as it was before the reindex" in err, err
    assert "No space left on device" in err
    assert index.read_bytes() == before
    assert not aside_path(index).exists()
    # a reindex that completes leaves nothing aside
    monkeypatch.undo()
    assert cli.main(["--config", str(store.config_path), "reindex"]) == 0
    assert index.is_file() and not aside_path(index).exists()


def test_reindex_with_a_file_where_the_conversations_belong_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `reindex` failed in the index's delete with NotADirectoryError, exit 70
    config = make_config(tmp_path)
    config.data_dir.mkdir(parents=True)
    config.conversations_dir.write_text("x", encoding="utf-8")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(config.data_dir)}), encoding="utf-8")
    assert cli.main(["--config", str(path), "reindex"]) == exitcodes.EX_DATADIR
    err = capsys.readouterr().err
    assert "is not usable" in err and str(config.conversations_dir) in err
    assert config.conversations_dir.read_text(encoding="utf-8") == "x"


def test_reading_commands_need_no_daemon_secrets(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: with brain.provider anthropic, `conversations`, `search` and `status`
    # refused to run without ANTHROPIC_API_KEY (exit 78), which only the service's 0600
    # environment file holds; an operator's shell has not got it.
    raw = yaml.safe_load(store.config_path.read_text(encoding="utf-8"))
    raw.setdefault("brain", {})["provider"] = "anthropic"
    store.config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert store.json("conversations", "list", capsys=capsys)
    assert store.json("search", "sourdough", capsys=capsys)["results"]
    status, _ = store.run("status", "--json", capsys=capsys)
    assert status != exitcodes.EX_CONFIG
    # the daemon and check-config still insist on it
    assert store.run("check-config", capsys=capsys)[0] == exitcodes.EX_CONFIG


def test_reading_commands_next_to_a_daemon_do_not_index_its_lines(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `conversations` and `search` ran start-up recovery. Next to a running
    # daemon they indexed the lines it had written but not yet indexed itself, and then
    # the daemon indexed them too: `status` reported duplicate turns under load.
    from bot.transcript import TranscriptStore
    from bot.transcript_lines import turn_line

    conv_id = store.ids["web"]

    def turn_rows() -> int:
        from tests.sqlite_driver import sqlite3

        with sqlite3.connect(store.config.index_path) as conn:
            row = conn.execute(
                "SELECT count(*) FROM turns WHERE conversation_id = ?", (conv_id,)
            ).fetchone()
        return int(row[0])

    before = turn_rows()
    daemon_store = TranscriptStore(store.config.conversations_dir)
    daemon_store.open(exclusive=True)  # what a running daemon holds
    try:
        # the daemon's append, written and not yet indexed by it
        path = daemon_store.path(conv_id)
        with open(path, "ab") as fh:
            fh.write(json.dumps(turn_line("user", "in flight", 99)).encode() + b"\n")
        assert store.json("conversations", "list", capsys=capsys)
        assert store.json("search", "sourdough", capsys=capsys)["results"]
        assert turn_rows() == before  # left to the daemon
    finally:
        daemon_store.close()
    assert store.json("conversations", "list", capsys=capsys)
    assert turn_rows() == before + 1  # without a daemon, a command still catches up


def test_reading_commands_on_a_corrupt_index_exit_74_naming_the_file(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `conversations` and `search` ended in a traceback and exit 1; the
    # daemon and `status` say which file and what to do, with exit 74.
    store.config.index_path.write_bytes(b"this is not a database" * 400)
    for argv in (["conversations", "list"], ["search", "sourdough"]):
        status = cli.main(["--config", str(store.config_path), *argv])
        err = capsys.readouterr().err
        assert status == exitcodes.EX_DATABASE, argv
        assert "conversations.db" in err and "reindex" in err
        assert "Traceback" not in err
    assert store.run("reindex", capsys=capsys)[0] == 0  # the remedy it names works
    assert store.json("search", "sourdough", capsys=capsys)["results"]


def test_a_damaged_page_a_command_meets_after_the_open_exits_74_naming_the_file(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression (session 27): damage the open did not read (a page of the conversations'
    # id index) met by the search itself was "internal error: DatabaseError: database
    # disk image is malformed", exit 70, a bug's exit, naming no file or remedy.
    garble_page(store.config.index_path, "sqlite_autoindex_conversations_1")
    status = cli.main(["--config", str(store.config_path), "search", "sourdough"])
    err = capsys.readouterr().err
    assert status == exitcodes.EX_DATABASE, err
    assert f"{store.config.index_path} is damaged" in err and "my-agent reindex" in err, err
    assert "internal error" not in err
    assert store.run("reindex", capsys=capsys)[0] == 0  # the remedy it names works
    assert store.json("search", "sourdough", capsys=capsys)["results"]


def test_conversations_are_listed_and_shown_in_the_owners_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: `conversations list` and `conversations show` printed UTC times with no
    # zone: for an owner in New York an evening conversation (20:30) showed at 01:30 on
    # the next day, unlike the dates of `my-agent search`, /search and the assistant.
    config_path, config = _new_york_owner(tmp_path, monkeypatch)

    async def fill() -> str:
        services = await open_services(config, brain=ScriptedBrain())
        try:
            rec = await services.conversations.create("web")
            await services.conversations.append_turn(
                rec.id, "user", "kayaks at dusk", timestamp="2999-03-02T01:30:00.000Z"
            )
            return str(rec.id)
        finally:
            await shutdown_services(services)

    conv = asyncio.run(fill())
    for args in (["conversations", "list"], ["conversations", "show", conv]):
        capsys.readouterr()
        assert cli.main(["--config", str(config_path), *args]) == 0
        out = capsys.readouterr().out
        assert "2999-03-01 20:30" in out and "2999-03-02" not in out, out


def test_conversations_show_skips_lines_of_the_wrong_shape(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: valid JSON that is no turn (`{"type":"turn"}`, a turn without content)
    # was shown as "[None] ... None", or ended `conversations show` in a KeyError.
    conv_id = store.ids["web"]
    path = store.config.conversations_dir / f"{conv_id}.jsonl"
    with open(path, "ab") as fh:
        for raw in (b"[1,2]", b'"x"', b'{"type":"turn"}', b'{"type":"turn","role":"user"}'):
            fh.write(raw + b"\n")
        fh.write(json.dumps({"type": "event"}).encode() + b"\n")
        # SPEC.md's channel example: a turn without a number is kept, shown without one
        unnumbered = {"type": "turn", "role": "user", "content": "unnumbered", "sender": "me"}
        fh.write(json.dumps(unnumbered).encode() + b"\n")
    status, out = store.run("conversations", "show", conv_id, capsys=capsys)
    assert status == 0
    assert "None" not in out and "(: )" not in out
    assert out.splitlines()[-1].endswith(" me: unnumbered")
    assert len([line for line in out.splitlines() if line.startswith("[1] ")]) == 2
    shown = store.json("conversations", "show", conv_id, capsys=capsys)["lines"]
    assert [line.get("content") for line in shown if line["type"] == "turn"] == [
        "Plan the trip to Porto in May",
        "re: Plan the trip to Porto in May",
        "unnumbered",
    ]
    assert all(line.get("event") for line in shown if line["type"] == "event")


@pytest.mark.parametrize("verbose", [False, True])
def test_an_internal_error_exits_70_with_one_line(
    store: Store,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    verbose: bool,
) -> None:
    # Regression: a bug in a command ended in a 30-line traceback and exit 1, the status
    # `status` uses for "a problem is listed"; EX_SOFTWARE (70) was defined but unused.
    def broken(*_args: Any) -> int:
        raise RuntimeError("a bug in the health check")

    monkeypatch.setattr("bot.healthcheck.main", broken)
    capsys.readouterr()
    argv = ["--config", str(store.config_path), "status", *(["--verbose"] if verbose else [])]
    assert cli.main(argv) == exitcodes.EX_SOFTWARE == 70
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("my-agent status: internal error: RuntimeError: a bug in the health")
    assert ("Traceback" in err) is verbose
    if not verbose:
        assert err.strip() == last and "--verbose" in last


def test_an_internal_error_stops_the_daemon_with_70_and_its_traceback_in_the_log(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any, **_kwargs: Any) -> int:
        raise RuntimeError("a bug at start")

    class Exited(BaseException):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr("bot.daemon.run_daemon", broken)
    monkeypatch.setattr(os, "_exit", fake_exit)  # `run` ends in os._exit (bot.cli)
    with pytest.raises(Exited) as exited:
        cli.main(["--config", str(store.config_path), "run"])
    assert exited.value.args == (exitcodes.EX_SOFTWARE,)
    err = capsys.readouterr().err
    assert "internal error: the daemon stops" in err and "Traceback" in err


def test_a_keyword_only_listing_says_so(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    # The plain listing named the search method only when nothing was found: results of a
    # keyword-only search (no model here) read like a full search's.
    method = store.json("search", "sourdough feeding", capsys=capsys)["method"]
    status, text = store.run("search", "sourdough feeding", capsys=capsys)
    assert status == 0
    assert ("keyword search only" in text) == (method != "hybrid")
    assert "(, " not in text


def test_conversations_show_says_what_commands_and_changes_were(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: only an event's title, text or summary was printed, so a command and a
    # model change read "(command: )" and "(meta_update: )".
    conv_id = store.ids["web"]
    path = store.config.conversations_dir / f"{conv_id}.jsonl"
    with open(path, "ab") as fh:
        for line in (
            {"type": "event", "event": "command", "command": "/model", "args": "haiku"},
            {"type": "event", "event": "meta_update", "model": "haiku"},
            {"type": "event", "event": "command", "command": "/new"},
            {"type": "event", "event": "meta_update", "pinned": False},
            {"type": "event", "event": "notes_behind", "throughTurn": 4},
            {"type": "event", "event": "something_new"},
        ):
            fh.write(json.dumps(line).encode() + b"\n")
    status, out = store.run("conversations", "show", conv_id, capsys=capsys)
    assert status == 0
    assert out.splitlines()[-6:] == [
        "    (command: /model haiku)",
        "    (meta_update: model haiku)",
        "    (command: /new)",
        "    (meta_update: unpinned)",
        "    (notes_behind: a late reply: the notes are to be written again after turn 4)",
        "    (something_new)",  # an event with nothing to say: no dangling ": "
    ]
    assert "    (meta_update: title 'Porto trip')" in out


def test_control_characters_in_stored_text_reach_no_terminal_raw(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: conversations list/show and search printed stored text as it was, so
    # an escape sequence in a message (a group member's, a pasted log) cleared the
    # owner's screen or rewrote the lines above; --json keeps the text exact.
    hostile = "Porto \x1b[2J\x1b]0;pwned\x07 \x9b31m back\roverwritten"
    conv_id = store.ids["web"]
    path = store.config.conversations_dir / f"{conv_id}.jsonl"
    with open(path, "ab") as fh:
        line = {"type": "turn", "role": "user", "content": hostile, "turnNumber": 2}
        fh.write(json.dumps(line).encode() + b"\n")
    for argv in (["conversations", "show", conv_id], ["search", "overwritten"]):
        status, out = store.run(*argv, capsys=capsys)
        assert status == 0
        assert not set(out) & {"\x1b", "\x07", "\x9b", "\r"}, out
        assert "\\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m back" in out
    shown = store.json("conversations", "show", conv_id, capsys=capsys)["lines"]
    assert hostile in [line.get("content") for line in shown]


@pytest.mark.parametrize("command", ["run", "check-config", "conversations", "search", "status"])
def test_each_commands_help_lists_config_and_says_what_it_does(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``my-agent run --help`` showed only ``-h`` and a bare ``--verbose``,
    though README documents ``my-agent run [--config F]`` (the option worked, hidden),
    and said nothing of what the command does."""
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--config CONFIG" in out
    assert "$MY_AGENT_CONFIG" in out and "traceback" in out
    described = out.split("\n\n")[1].strip()
    assert described and not described.startswith(("options:", "positional"))


@pytest.mark.parametrize("command", ["conversations", "search"])
def test_every_option_of_the_reading_commands_has_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``--channel``, ``--limit``, ``--json`` (and the positionals) were
    listed with no word of help, so the owner could not tell ``--limit``'s default or
    which channels there are."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        a.dest
        for a in sub.choices[command]._actions
        if not a.help and a.dest != "help"  # argparse's own -h has its help
    ]
    assert bare == []
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert "web, telegram, email, loopback" in capsys.readouterr().out


def test_top_level_help_does_not_point_at_a_file_owners_do_not_have(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Regression: ``my-agent --help`` opened on the module's docstring, 'The
    ``my-agent`` command line (SPEC.md "Command line")'."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "SPEC.md" not in out and "``" not in out
    assert "COMMAND --help" in out


def test_conversations_list_with_an_id_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Regression: ``my-agent conversations list conv-...`` (``show`` meant) ignored the
    id, listed every conversation and exited 0."""
    with pytest.raises(SystemExit) as done:
        cli.main(["conversations", "list", "conv-01ABC"])
    assert done.value.code == exitcodes.EX_USAGE
    assert "conversations show" in capsys.readouterr().err


def test_conversations_show_without_an_id_shows_the_commands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Regression: ``my-agent conversations show`` printed the top-level usage (every
    command, none of ``conversations``' arguments): nothing showed where the ID goes."""
    with pytest.raises(SystemExit) as done:
        cli.main(["conversations", "show"])
    assert done.value.code == exitcodes.EX_USAGE
    err = capsys.readouterr().err
    assert "usage: my-agent conversations" in err and "[id]" in err
    assert "install-service" not in err
    assert "show needs an ID" in err


def test_conversation_times_name_their_zone(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``conversations list`` and ``show`` printed ``2026-11-26 22:38`` with
    no zone, so an owner on a server in UTC could not tell it was owner.timezone's."""
    raw = yaml.safe_load(store.config_path.read_text(encoding="utf-8"))
    raw["owner"]["timezone"] = "America/New_York"
    store.config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    status, listed = store.run("conversations", "list", capsys=capsys)
    assert status == 0
    assert all(re.search(r" \d\d:\d\d E[SD]T ", row) for row in listed.splitlines()), listed
    status, shown = store.run("conversations", "show", store.ids["web"], capsys=capsys)
    assert status == 0 and re.search(r"\] \d{4}-\d\d-\d\d \d\d:\d\d E[SD]T You: Plan", shown)


def test_an_empty_conversation_list_says_so_and_where(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a list with nothing in it (a channel never used, a wrong data
    directory) printed nothing at all, like a command that did not run."""
    capsys.readouterr()
    status = cli.main(
        ["--config", str(store.config_path), "conversations", "list", "--channel", "email"]
    )
    captured = capsys.readouterr()
    assert status == 0 and captured.out == ""
    assert captured.err.strip() == f"no conversations on email in {store.config.data_dir}"


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_search_is_a_usage_error(
    store: Store, query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: ``my-agent search ""`` answered "no match (keyword)" and exit 0."""
    status, out = store.run("search", query, capsys=capsys)
    assert status == exitcodes.EX_USAGE and out == ""


def test_search_dates_are_checked_before_the_store_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a --from after --to was found only once the store and the embedding
    model were open (the model's warning, and its load, came first): here, with no data
    directory, it was reported as exit 73 instead of the usage error it is."""
    monkeypatch.chdir(tmp_path)
    for var in ("MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    status = cli.main(["search", "x", "--from", "2026-12-01", "--to", "2026-11-01"])
    assert status == exitcodes.EX_USAGE
    assert "--from 2026-12-01 is after --to 2026-11-01" in capsys.readouterr().err


def test_building_the_parser_does_not_import_the_store() -> None:
    """Regression: the parser imported bot.healthcheck for ``status``'s two options, and
    with it the index, recovery and numpy: about 0.1 s of CPU (0.45 s uncached) in the
    start of every command, ``--help`` and ``check-config`` included."""
    probe = (
        "import sys, bot.cli; bot.cli.build_parser(); "
        "print(sorted(m for m in ('numpy', 'bot.healthcheck', 'bot.index') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_conversations_show_names_the_owner(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: the owner's turns were shown under the identity the channel gave,
    "424242: The sourdough..." on Telegram and "user: Plan..." on the web; then as
    "Owner:" next to "assistant:". Now in the dashboard's words: You and Assistant."""
    status, shown = store.run("conversations", "show", store.ids["telegram"], capsys=capsys)
    assert status == 0 and " You: The sourdough starter" in shown, shown
    assert "424242:" not in shown and " Assistant: " in shown and " assistant: " not in shown
    status, shown = store.run("conversations", "show", store.ids["web"], capsys=capsys)
    assert " You: Plan the trip" in shown and " user: " not in shown


def test_conversations_list_aligns_titles_and_counts_turns(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: "1 turns", and a pinned conversation's title 7 columns to the right."""
    status, listed = store.run("conversations", "list", capsys=capsys)
    rows = listed.splitlines()
    assert status == 0 and len(rows) == 2
    assert all(" 1 turns" not in row for row in rows), listed
    assert any(" 1 turn " in row and " pinned " in row for row in rows), listed
    # (an unnamed chat is named as the dashboard names it: "424242 · New conversation")
    titles = {row.index("Porto trip") if "Porto trip" in row else row.index("424242 · New conv")
              for row in rows}  # fmt: skip
    assert len(titles) == 1, listed


def test_conversations_show_leaves_out_message_ids(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: each e-mail's Message-ID printed as a bare "(message_ref)" line."""

    async def add_ref() -> None:
        services = await open_services(store.config, brain=ScriptedBrain())
        try:
            await services.conversations.record_message_ref(
                store.ids["telegram"], "email", "<m1@example.org>", "in"
            )
        finally:
            await shutdown_services(services)

    asyncio.run(add_ref())
    status, shown = store.run("conversations", "show", store.ids["telegram"], capsys=capsys)
    assert status == 0 and "message_ref" not in shown, shown
    shown_json = store.json("conversations", "show", store.ids["telegram"], capsys=capsys)
    assert any(line.get("event") == "message_ref" for line in shown_json["lines"])


def test_a_missing_data_directory_is_named_absolute_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: run from another directory than the daemon's, `search` and
    `conversations` said "data directory .my_agent does not exist": a relative path, and
    no word of where the store could be."""
    for var in ("MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    for argv in (["conversations", "list"], ["search", "anything"]):
        assert cli.main(argv) == exitcodes.EX_DATADIR, argv
        err = capsys.readouterr().err
        assert f"data directory {tmp_path / '.my_agent'} does not exist" in err, err
        assert "--config" in err and "MY_AGENT_DATA_DIR" in err
        assert "directory the daemon runs in" in err
    monkeypatch.setenv("MY_AGENT_DATA_DIR", str(tmp_path / "elsewhere"))
    assert cli.main(["search", "anything"]) == exitcodes.EX_DATADIR
    err = capsys.readouterr().err
    assert f"{tmp_path / 'elsewhere'} does not exist (is the store elsewhere?" in err


def test_status_and_check_config_name_the_data_directory_absolute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `my-agent status` printed "data dir: .my_agent" (and `check-config`
    "data in .my_agent"), relative, while the daemon logs its data directory absolute:
    run from elsewhere, the owner could not tell which store was checked."""
    for var in ("MY_AGENT_DATA_DIR", "MY_AGENT_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".my_agent").mkdir()
    absolute = str((tmp_path / ".my_agent").resolve())
    cli.main(["status", "--quick"])
    out = capsys.readouterr().out
    assert re.search(rf"^data dir: +{re.escape(absolute)}$", out, re.M), out
    cli.main(["status", "--quick", "--json"])
    assert json.loads(capsys.readouterr().out)["data_dir"] == absolute
    assert cli.main(["check-config"]) == exitcodes.OK
    assert f"data in {absolute}," in capsys.readouterr().out
