"""What a ``my-agent bench soak`` run (bot.bench.soak) is checked against, read from the
daemon's data directory and the fake Bot API once the load stops: every owner message
answered once (or once per burst, the debounce), every stranger's message stored in its
party file, and the dashboard's requests answered. :func:`drain` waits for the replies;
:func:`verify` counts what was handled and adds what was not to the run's errors.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bot.bench.soak_load import TELEGRAM_OWNER, Load


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _owner_replies(data_dir: Path) -> Counter[str]:
    return Counter(
        r["inReplyTo"]
        for r in _jsonl(data_dir / "loopback-sent.jsonl")
        if r.get("kind") in ("reply", "command")
    )


def _merged(data_dir: Path, channel: str) -> int:
    """The owner's messages on ``channel`` answered with a later one of the same burst
    (``reply_merged`` events, the debounce of ``brain.debounce_seconds``)."""
    count = 0
    for path in (data_dir / "conversations").glob("conv-*.jsonl"):
        lines = _jsonl(path)
        if next((x.get("channel") for x in lines if x.get("type") == "meta"), None) == channel:
            count += sum(1 for x in lines if x.get("event") == "reply_merged")
    return count


def _tg_expected(load: Load, data_dir: Path) -> int:
    """Replies the owner's Telegram messages are due: one each, but one per burst."""
    return load.sent["telegram_owner"] - _merged(data_dir, "telegram")


async def drain(load: Load, data_dir: Path, telegram: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for every reply the load is due; False if not all came."""
    wanted = set(load.owner_ids) | set(load.search_ids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tg_owner = _tg_expected(load, data_dir)
        if set(_owner_replies(data_dir)) >= wanted and _tg_replies(telegram) >= tg_owner:
            return True
        await asyncio.sleep(0.2)
    return False


def _tg_replies(telegram: Any) -> int:
    # Escalations about strangers carry Trust/Block buttons; replies to the owner do not.
    return sum(
        1
        for m in telegram.sent_to(TELEGRAM_OWNER)
        if "inline_keyboard" not in (m.get("reply_markup") or {})
    )


def _stored_external(data_dir: Path) -> Counter[str]:
    """Strangers' messages recorded in their party files, per channel."""
    out: Counter[str] = Counter()
    for path in (data_dir / "external").glob("*.jsonl"):
        lines = _jsonl(path)
        channel = next((x.get("channel") for x in lines if x.get("type") == "meta"), "?")
        out[str(channel)] += sum(
            1 for x in lines if x.get("type") == "message" and x.get("direction") == "in"
        )
    return out


def verify(load: Load, data_dir: Path, telegram: Any, drained: bool) -> dict[str, Any]:
    """The run's sent and handled counts; what went missing or twice goes to ``load.errors``."""
    replies = _owner_replies(data_dir)
    wanted = list(load.owner_ids) + list(load.search_ids)
    missing = [m for m in wanted if replies[m] == 0]
    duplicated = [m for m in wanted if replies[m] > 1]
    if missing:
        load.errors["missing_replies"] += len(missing)
    if duplicated:
        load.errors["duplicate_replies"] += len(duplicated)
    tg_sent = telegram.sent_to(TELEGRAM_OWNER)
    tg_replies = _tg_replies(telegram)
    tg_expected = _tg_expected(load, data_dir)
    if tg_replies != tg_expected:
        kind = "missing" if tg_replies < tg_expected else "duplicate"
        load.errors[f"telegram_{kind}_replies"] += abs(tg_replies - tg_expected)
    stored = _stored_external(data_dir)
    for channel in ("loopback", "telegram"):
        if stored[channel] != load.sent[f"{channel}_stranger"] - (
            load.errors["loopback_ingest"] if channel == "loopback" else 0
        ):
            load.errors[f"{channel}_stranger_not_stored"] += 1
    handled = {
        "loopback_owner": len(load.owner_ids),
        "loopback_search": len(load.search_ids),
        "loopback_stranger_stored": stored["loopback"],
        "telegram_stranger_stored": stored["telegram"],
        "telegram_owner_replies": tg_replies,
        # answered with a later message of the same burst (brain.debounce_seconds)
        "telegram_owner_merged": load.sent["telegram_owner"] - tg_expected,
        "web_requests": load.sent["web_requests"]
        - sum(n for k, n in load.errors.items() if k.startswith("web ")),
    }
    return {
        "messages_sent": dict(load.sent),
        "messages_handled": handled,
        "replies_drained": drained,
        "telegram_messages_to_owner": len(tg_sent),
    }
