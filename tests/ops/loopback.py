"""Driving the real daemon (:mod:`tests.ops.daemon`) through its loopback channel, and
reading what it left on disk, for the reliability and crash tests.

``POST /inbound`` answers 200 only once a message is durable (its acknowledgement; 202:
held in memory on a full disk, not acknowledged), and
every message the daemon sends through the channel is appended durably to
``loopback-sent.jsonl``, so sends can be counted across crashes. The ``session`` and
``daemons`` fixtures are in ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from channels.loopback import read_json_lines
from tests.ops.daemon import DaemonProcess

OWNERS = ("owner", "owner2")


def base_config(root: Path, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "data_dir": str(root / "data"),
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True}},
        "embedding": {"enabled": False},
        "owner": {"identities": {"loopback": list(OWNERS)}},
        "logging": {"level": "INFO"},
        # a reply to every message (these tests count them); the debounce, which answers
        # a burst once, is tests/test_debounce.py's and the soak bench's
        "brain": {"debounce_seconds": {}},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def fake_telegram(api_base: str, *, loopback: bool = False) -> dict[str, Any]:
    """``channels`` for a daemon polling the Telegram fake at ``api_base`` (and the
    loopback channel with it when ``loopback``), the dashboard off."""
    from bot.bench.fakes.telegram_api import TOKEN

    return {
        "web": {"enabled": False},
        "loopback": {"enabled": loopback},
        "telegram": {"enabled": True, "token": TOKEN, "api_base": api_base, "polling_timeout": 1},
    }


class Loopback:
    """Client of the daemon's loopback channel."""

    def __init__(self, daemon: DaemonProcess, session: aiohttp.ClientSession) -> None:
        self.daemon = daemon
        self.session = session

    @property
    def url(self) -> str:
        port = (self.daemon.data_dir / "loopback.port").read_text().strip()
        return f"http://127.0.0.1:{port}"

    async def post(self, sender: str, text: str, message_id: str) -> int | None:
        """HTTP status of the delivery, or None when the connection failed."""
        body = {"sender": sender, "text": text, "message_id": message_id}
        try:
            async with self.session.post(f"{self.url}/inbound", json=body) as resp:
                await resp.read()
                return resp.status
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None


# -- reading what the daemon left on disk ------------------------------------------------
# the loopback channel's own tolerant JSONL reader (torn lines after a kill are skipped)
_jsonl = read_json_lines


def owner_turns(data_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """conversation id -> its turn lines."""
    return {
        p.stem: [x for x in _jsonl(p) if x.get("type") == "turn"]
        for p in sorted((data_dir / "conversations").glob("conv-*.jsonl"))
    }


def stored_owner_ids(data_dir: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for turns in owner_turns(data_dir).values():
        for t in turns:
            if t["role"] == "user":
                ids[(t.get("metadata") or {}).get("messageId")] += 1
    return ids


def stored_stranger_ids(data_dir: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for p in (data_dir / "external").glob("*.jsonl"):
        for x in _jsonl(p):
            if x.get("type") == "message" and x.get("direction") == "in":
                ids[x.get("messageRef")] += 1
    return ids


def sent(data_dir: Path) -> list[dict[str, Any]]:
    return _jsonl(data_dir / "loopback-sent.jsonl")


def replies_by_message(data_dir: Path) -> Counter[str]:
    return Counter(r["inReplyTo"] for r in sent(data_dir) if r["kind"] == "reply")


async def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, daemon: DaemonProcess
) -> None:
    """Until ``predicate`` (a function, or a coroutine function) is true; after
    ``timeout`` seconds an AssertionError shows the daemon's log."""
    deadline = time.monotonic() + timeout
    while not await _call(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{daemon.log()}")
        await asyncio.sleep(0.05)


async def _call(predicate: Callable[[], Any]) -> bool:
    result = predicate()
    if asyncio.iscoroutine(result):
        result = await result
    return bool(result)


async def start_daemon(
    daemons: list[DaemonProcess],
    root: Path,
    config: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> DaemonProcess:
    """A daemon on ``config``, started (its READY=1 came) and handed to the ``daemons``
    fixture, which kills it after the test if it is still running."""
    daemon = DaemonProcess(root, config, env=env)
    daemons.append(daemon)
    await daemon.start(timeout=timeout)
    return daemon


async def wait_replies(
    daemon: DaemonProcess,
    message_ids: set[str],
    timeout: float,
    what: str = "replies",
    data_dir: Path | None = None,
) -> None:
    """Until a reply to each of ``message_ids`` was sent (``loopback-sent.jsonl`` of
    ``data_dir``, else the daemon's)."""
    data = data_dir or daemon.data_dir
    await wait_until(lambda: set(replies_by_message(data)) >= message_ids, timeout, what, daemon)
