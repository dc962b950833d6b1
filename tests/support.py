"""Helpers for the backbone tests: the seed's example lines, inbound messages, scripted
brains, and a child-process daemon on the loopback channel."""

from __future__ import annotations

import asyncio
import errno
import inspect
import itertools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bot.brain.base import BrainReply, BrainRequest, DeltaSink, Usage
from bot.events import InboundMessage
from tests.ops import zygote

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = Path("/work/venv/bin/python")


async def wait_until(
    predicate: Callable[[], Any], timeout: float = 30.0, what: str = "the condition"
) -> None:
    """Until ``predicate`` (a function, or a coroutine function) holds, polled every
    20 ms; an AssertionError naming ``what`` after ``timeout`` seconds. For a test that
    waits for a state: a fixed sleep is outlasted by a busy machine, this is not (the
    deadline is only there so a broken test fails instead of hanging)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_logged(
    caplog: pytest.LogCaptureFixture, needle: str, count: int = 1, timeout: float = 30.0
) -> None:
    """Until ``count`` records captured by ``caplog`` contain ``needle`` (the logger's
    level must let them through: ``caplog.set_level``)."""

    def logged() -> bool:
        return sum(needle in r.getMessage() for r in caplog.records) >= count

    await wait_until(logged, timeout, f"{count} log record(s) with {needle!r}")


def shared_dir() -> Path:
    """``../shared`` beside the repository, else $MY_AGENT_SHARED, else /work/shared."""
    env = os.environ.get("MY_AGENT_SHARED")
    if env:
        return Path(env)
    relative = REPO / ".." / "shared"
    return relative if relative.is_dir() else Path("/work/shared")


SEED_000 = "seeds/000_e1fa40ed9b7c51e9.txt"


def seed_text() -> str:
    return (shared_dir() / SEED_000).read_text(encoding="utf-8")


def seed_jsonl_blocks() -> list[list[str]]:
    """Every ```jsonl block of seed 000, as lists of non-empty lines."""
    blocks = re.findall(r"```jsonl\n(.*?)```", seed_text(), flags=re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def seed_transcript_example() -> list[dict[str, Any]]:
    """The example transcript under seed 000 "Transcript (JSONL)" / "Format"."""
    text = seed_text()
    start = text.index("## Transcript (JSONL)")
    block = re.search(r"```jsonl\n(.*?)```", text[start:], flags=re.S)
    assert block is not None, "seed 000 lost its transcript example"
    return [json.loads(line) for line in block.group(1).splitlines() if line.strip()]


_ids = itertools.count(1)


def inbound(
    text: str,
    *,
    channel: str = "telegram",
    sender: str = "424242",
    chat: str | None = None,
    message_id: str | None = None,
    **fields: Any,
) -> InboundMessage:
    """An inbound message as a channel adapter would build it."""
    return InboundMessage(
        channel=channel,
        sender_id=sender,
        text=text,
        message_id=message_id or f"m{next(_ids)}",
        chat_id=chat if chat is not None else sender,
        **fields,
    )


class ScriptedBrain:
    """A Brain protocol implementation answering from a script and recording requests.

    Replies carry usage, cost and thinking text so the transcript's assistant-turn fields
    can be checked; ``gate`` holds every reply until it is set; ``delay`` slows them.
    """

    name = "scripted"

    def __init__(self, *, delay: float = 0.0) -> None:
        self.requests: list[BrainRequest] = []
        self.delay = delay
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        self.requests.append(request)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        text = f"re: {request.text}"
        if on_delta is not None:
            await on_delta(text)
        return BrainReply(
            text=text,
            model="scripted-model",
            usage=Usage(input=100 + len(request.text), output=20),
            cost=0.0015,
            thinking_text=f"thinking about {request.text}",
        )

    async def close(self) -> None:
        return None


# -- a daemon child process -------------------------------------------------------------
class Daemon:
    """``python -m bot.cli run --config F`` with the loopback channel on a free port
    (forked from :mod:`tests.ops.zygote` unless ``entry`` is given or
    ``MY_AGENT_TEST_FRESH_DAEMONS=1``)."""

    def __init__(self, root: Path, config: dict[str, Any], entry: Path | None = None) -> None:
        self.root = root
        self.config = config
        self.entry = entry  # a script run instead of ``-m bot.cli`` (same arguments)
        self.config_path = root / "config.yaml"
        self.proc: asyncio.subprocess.Process | zygote.ForkedProcess | None = None
        self.runs = 0
        self.port: int | None = None

    @property
    def data_dir(self) -> Path:
        return Path(self.config["data_dir"])

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ANTHROPIC_API_KEY", "NOTIFY_SOCKET", "WATCHDOG_USEC", "MY_AGENT_CONFIG")
            and not k.startswith("MY_AGENT_")
        }
        env["PYTHONPATH"] = str(REPO)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def log_path(self) -> Path:
        return self.root / f"daemon-{self.runs}.log"

    async def start(self, timeout: float = 90.0) -> int:
        self.config_path.write_text(yaml.safe_dump(self.config), encoding="utf-8")
        port_file = self.data_dir / "loopback.port"
        port_file.unlink(missing_ok=True)
        self.runs += 1
        args = ["run", "--config", str(self.config_path)]
        if self.entry is None and zygote.wanted():
            # forked from a helper that has imported the daemon (tests/ops/zygote.py);
            # an entry script, which patches before it imports, gets a fresh interpreter
            self.proc = await zygote.zygote(self.env()).spawn(
                "bot.cli", args, cwd=self.root, env=self.env(), log=self.log_path,
                preload=zygote.daemon_imports(self.config, self.env()),
            )  # fmt: skip
        else:
            python = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
            with self.log_path.open("wb") as log:
                entry = [str(self.entry)] if self.entry is not None else ["-m", "bot.cli"]
                self.proc = await asyncio.create_subprocess_exec(
                    python, *entry, *args,
                    cwd=str(self.root), env=self.env(), stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.returncode is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}:\n{self.log()}")
            if loop.time() > deadline:
                raise TimeoutError(f"daemon not up within {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)
        self.port = int(port_file.read_text())
        # The port file is written when the channel listens; wait until it answers.
        await self.wait_log("my-agent ready", timeout=max(1.0, deadline - loop.time()))
        return self.port

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    async def wait_log(self, needle: str, timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while needle not in self.log():
            if self.proc is not None and self.proc.returncode is not None:
                raise RuntimeError(f"daemon exited before {needle!r}:\n{self.log()}")
            if loop.time() > deadline:
                raise TimeoutError(f"{needle!r} not logged within {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)

    async def post(self, sender: str, text: str, message_id: str, **fields: Any) -> int:
        body = {"sender": sender, "text": text, "message_id": message_id, **fields}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{self.port}/inbound", json=body) as resp:
                await resp.read()
                return resp.status

    def sent(self) -> list[dict[str, Any]]:
        path = self.data_dir / "loopback-sent.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    async def signal(self, sig: int = signal.SIGTERM, timeout: float = 40.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


def transcript_lines(conversations_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every transcript under a data directory, parsed (corrupt lines skipped)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(conversations_dir.glob("conv-*.jsonl")):
        lines = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue
        out[path.stem] = lines
    return out


def turns(lines: Sequence[dict[str, Any]], role: str | None = None) -> list[dict[str, Any]]:
    return [
        line
        for line in lines
        if line.get("type") == "turn" and (role is None or line.get("role") == role)
    ]


# -- a full disk ---------------------------------------------------------------------
def mount_tmpfs(path: Path, size: str) -> None:
    """A tmpfs of ``size`` ("4m") at ``path``, for full-disk tests (needs root: a failure
    in CI, a skip elsewhere). The caller unmounts it (``umount -l``)."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        reason = f"cannot mount a tmpfs (needs root): {proc.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def fill_disk(path: Path) -> Path:
    """Fill the file system at ``path`` up to the last byte; returns the filler file."""
    filler = path / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 512, 1):  # big chunks, then whatever is left
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def garble_page(path: Path, name: str) -> None:
    """Garbage over the root page of the table or index ``name`` of the SQLite database
    ``path`` (closed; its WAL is checkpointed first): damage that opening it does not see."""
    from tests.sqlite_driver import sqlite3

    conn = sqlite3.connect(path)
    try:
        query = "SELECT rootpage FROM sqlite_master WHERE name = ?"
        (page,) = conn.execute(query, (name,)).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(bytes(range(256)) * (size // 256))
