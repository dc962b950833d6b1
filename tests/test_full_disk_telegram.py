"""A full disk while the owner writes on Telegram (the real daemon, tests/ops/daemon.py,
polling the fake Bot API server, its data directory on a small tmpfs filled up): an
update that cannot be made durable is not confirmed (the offset stays below it, so
Telegram keeps it), the owner is told once, and once space comes back every message is
stored once and answered once."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import (
    base_config,
    fake_telegram,
    owner_turns,
    start_daemon,
    stored_owner_ids,
    wait_until,
)
from tests.support import fill_disk, mount_tmpfs

pytestmark = pytest.mark.slow

OWNER = 1001
READOUT = "[offline mode:"  # the offline brain's replies


def _replies(fake: Any) -> int:
    return sum(1 for m in fake.sent_to(OWNER) if m["text"].startswith(READOUT))


async def test_a_full_disk_confirms_no_update_tells_the_owner_once_and_recovers(
    tmp_path: Path, daemons: list[DaemonProcess], telegram_fake: Any
) -> None:

    data = tmp_path / "data"
    mount_tmpfs(data, "24m")
    try:
        config = base_config(
            tmp_path,
            channels=fake_telegram(telegram_fake.base_url),
            owner={"identities": {"telegram": [str(OWNER)]}},
        )
        daemon = await start_daemon(daemons, tmp_path, config, timeout=90)
        telegram_fake.inject_message(OWNER, "before the disk fills")
        await wait_until(lambda: _replies(telegram_fake) == 1, 30, "a reply", daemon)

        filler = fill_disk(data)
        # Larger than a page: a file's slack in its last block cannot absorb it.
        bulk = " ".join(["tomato"] * 2000)
        full = [telegram_fake.inject_message(OWNER, f"full {i} {bulk}") for i in range(3)]
        await wait_until(
            lambda: len(telegram_fake.sent_to(OWNER)) > 1, 30, "the owner told", daemon
        )
        alert = telegram_fake.sent_to(OWNER)[-1]
        assert "stor" in alert["text"].lower() or "disk" in alert["text"].lower(), alert
        # Not durable, so not confirmed: Telegram still holds every one of them.
        held = {u["message"]["message_id"] for u in telegram_fake.pending_updates}
        assert {m["message_id"] for m in full} <= held
        assert daemon.proc is not None and daemon.proc.returncode is None  # still running

        filler.unlink()  # space comes back
        await wait_until(
            lambda: not telegram_fake.pending_updates and _replies(telegram_fake) == 4,
            60,
            "every update confirmed and answered",
            daemon,
        )
        assert await daemon.terminate() == 0, daemon.log()
        refs = {f"{OWNER}:{m['message_id']}" for m in full}
        stored = stored_owner_ids(data)
        assert {r: stored[r] for r in refs if stored[r] != 1} == {}
        for conv_id, turns in owner_turns(data).items():
            users = Counter(t["turnNumber"] for t in turns if t["role"] == "user")
            answers = Counter(t["turnNumber"] for t in turns if t["role"] == "assistant")
            assert answers == users, conv_id
        assert _replies(telegram_fake) == 4
        # One alert for the episode, not one per message or per redelivery.
        others = [m for m in telegram_fake.sent_to(OWNER) if not m["text"].startswith(READOUT)]
        assert len(others) == 1, [m["text"][:80] for m in others]
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
