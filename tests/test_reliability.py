"""Reliability suite: the real daemon under faults keeps every promise about messages.

Each test runs ``python -m bot.cli run`` as a child process on a temporary data directory
(tests/ops/daemon.py) and drives it through the loopback channel: ``POST /inbound``
answers 200 only once a message is durable (its acknowledgement), and every message the
daemon sends through the channel is appended durably to ``loopback-sent.jsonl``, so we
can count sends across crashes.

The promises checked after each fault:

- every acknowledged message is in its transcript exactly once (owner messages as user
  turns of their conversation, strangers' in their party record);
- the index matches the transcripts (``my-agent status``'s consistency check: per
  conversation turn counts, FTS documents, FTS5 integrity-check);
- no reply is sent twice (one ``reply`` per owner message, no outbox row sent twice) and
  no message is answered twice (one assistant turn per user turn).

Faults: kill -9 under a steady load of owner and stranger messages; a deleted
``conversations.db``; a full disk (a tmpfs data directory filled up); the Anthropic API
down for 60 simulated seconds (time scaled down 40x: outage, retry budget and retry
intervals together).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot import healthcheck
from bot.config import build_config
from bot.transcript_lines import recallable
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import (
    OWNERS,
    Loopback,
    base_config,
    fake_telegram,
    owner_turns,
    replies_by_message,
    sent,
    start_daemon,
    stored_owner_ids,
    stored_stranger_ids,
    wait_replies,
    wait_until,
)
from tests.support import fill_disk, mount_tmpfs

IN_CI = os.environ.get("CI") == "true"
STRANGERS = ("stranger1", "stranger2", "stranger3")

pytestmark = pytest.mark.slow


def assert_promises(
    data_dir: Path,
    config: dict[str, Any],
    owner_ids: set[str],
    stranger_ids: set[str],
    env: dict[str, str] | None = None,
) -> None:
    """The invariants every test ends with (see the module docstring)."""
    stored = stored_owner_ids(data_dir)
    assert {m: stored[m] for m in owner_ids if stored[m] != 1} == {}, "owner messages"
    assert set(stored) == owner_ids, "unexpected owner turns"
    strangers = stored_stranger_ids(data_dir)
    assert {m: strangers[m] for m in stranger_ids if strangers[m] != 1} == {}, "strangers"
    # One reply per owner message, each sent once.
    replies = replies_by_message(data_dir)
    assert {m: replies[m] for m in owner_ids if replies[m] != 1} == {}, "replies"
    outbox_ids = Counter(r["outbox"] for r in sent(data_dir))
    assert [k for k, n in outbox_ids.items() if n > 1] == [], "an outbox row was sent twice"
    # One assistant turn per user turn, in every conversation.
    for conv_id, turns in owner_turns(data_dir).items():
        users = Counter(t["turnNumber"] for t in turns if t["role"] == "user")
        answers = Counter(t["turnNumber"] for t in turns if t["role"] == "assistant")
        assert all(n == 1 for n in users.values()), (conv_id, users)
        assert answers == users, (conv_id, users, answers)
    # The index matches the transcripts.
    report = healthcheck.collect(build_config(config, env=env or {}))
    index = report["index"]
    assert index["ok"], index
    assert index["fts_integrity"] == "ok"
    assert index["transcript_turns"] == index["index_turns"]
    # the offline brain's replies are readouts, kept out of FTS (bot.transcript_lines.recallable)
    searchable = sum(recallable(t) for turns in owner_turns(data_dir).values() for t in turns)
    assert index["fts_documents"] == index["searchable_turns"] == searchable


# -- kill -9 under load ----------------------------------------------------------------
CRASHES = 2


async def test_kill9_under_load_loses_nothing(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    config = base_config(tmp_path)
    daemon = DaemonProcess(tmp_path, config)
    daemons.append(daemon)
    loop = Loopback(daemon, session)
    acked: dict[str, str] = {}
    unacked: dict[str, str] = {}

    async def client(sender: str, round_: int) -> None:
        n = 0
        while True:
            n += 1
            mid = f"{sender}-r{round_}-{n}"
            status = await loop.post(sender, f"message {n} from {sender} about tomatoes", mid)
            if status == 200:
                acked[mid] = sender
            else:
                unacked[mid] = sender
                return  # the daemon is gone

    for round_ in range(CRASHES):
        await daemon.start()
        # Clients retry what was not acknowledged, with the same message id: a message
        # stored but not acknowledged before the crash must not be stored twice.
        for mid, sender in list(unacked.items()):
            assert await loop.post(sender, f"retry of {mid}", mid) == 200
            acked[mid] = unacked.pop(mid)
        target = len(acked) + 60
        clients = [asyncio.create_task(client(s, round_)) for s in (*OWNERS, *STRANGERS)]
        await wait_until(lambda t=target: len(acked) >= t, 60, "a steady load", daemon)
        await daemon.kill9()  # mid-flight: requests, appends, replies and sends in progress
        await asyncio.wait_for(asyncio.gather(*clients), 30)
        # Acknowledged means durable: everything acked is on disk before any restart.
        on_disk = stored_owner_ids(daemon.data_dir) + stored_stranger_ids(daemon.data_dir)
        assert [m for m in acked if on_disk[m] != 1] == []

    await daemon.start()
    for mid, sender in list(unacked.items()):
        assert await loop.post(sender, f"retry of {mid}", mid) == 200
    # The conversation continues after the restarts.
    after = {f"{o}-after": o for o in OWNERS}
    for mid, sender in after.items():
        assert await loop.post(sender, "after the crash", mid) == 200
    everything = {**acked, **unacked, **after}
    owner_ids = {m for m, s in everything.items() if s in OWNERS}
    stranger_ids = {m for m, s in everything.items() if s in STRANGERS}
    await wait_replies(daemon, owner_ids, 30, "a reply to every owner message")
    assert await daemon.terminate() == 0, daemon.log()
    assert_promises(daemon.data_dir, config, owner_ids, stranger_ids)
    # Both owner identities are one person on one channel: one pinned conversation, even
    # when their first messages race each other.
    assert len(owner_turns(daemon.data_dir)) == 1
    # Strangers: an acknowledgement at most once per party per escalation interval (one
    # more per crash is tolerated if it fell between the ack and its escalation record).
    acks = Counter(r["chat"] for r in sent(daemon.data_dir) if r["kind"] == "acknowledgement")
    assert set(acks) == set(STRANGERS) and max(acks.values()) <= 1 + CRASHES, acks


RANDOM_KILLS = 6


async def test_kill9_at_random_moments_loses_nothing(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    """SIGKILL at a random moment, again and again: during the start (the journal's
    replay, recovery, the channels starting) as well as under load. Every message
    acknowledged before a kill is on disk once, and once in the index at the end."""
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    config = base_config(tmp_path)
    daemon = DaemonProcess(tmp_path, config)
    daemons.append(daemon)
    loop = Loopback(daemon, session)
    acked: dict[str, str] = {}
    unacked: dict[str, str] = {}

    async def client(sender: str, round_: int, stop: asyncio.Event) -> None:
        n, mid = 0, ""
        while not stop.is_set():
            if not mid:
                n += 1
                mid = f"{sender}-r{round_}-{n}"
            # the same id again until acknowledged: a message stored but not acknowledged
            # before a kill must not be stored twice
            if await loop.post(sender, f"message {mid} about tomatoes", mid) == 200:
                acked[mid] = unacked.pop(mid, sender)
                mid = ""
            else:
                unacked[mid] = sender
                await asyncio.sleep(0.02)

    for round_ in range(RANDOM_KILLS):
        (daemon.data_dir / "loopback.port").unlink(missing_ok=True)  # the last run's
        await daemon.start(wait_ready=round_ % 2 == 1)
        stop = asyncio.Event()
        clients = [asyncio.create_task(client(s, round_, stop)) for s in (*OWNERS, *STRANGERS)]
        await asyncio.sleep(rng.uniform(0.0, 1.5))
        await daemon.kill9()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 30)
        on_disk = stored_owner_ids(daemon.data_dir) + stored_stranger_ids(daemon.data_dir)
        assert [m for m in acked if on_disk[m] != 1] == [], f"seed {seed}, round {round_}"

    await daemon.start()
    for mid, sender in list(unacked.items()):
        assert await loop.post(sender, f"retry of {mid}", mid) == 200
    everything = {**acked, **unacked}
    owner_ids = {m for m, s in everything.items() if s in OWNERS}
    stranger_ids = {m for m, s in everything.items() if s in STRANGERS}
    assert len(acked) > 20, f"seed {seed}: too little load to mean anything"
    await wait_replies(daemon, owner_ids, 30, "a reply to every owner message")
    assert await daemon.terminate() == 0, daemon.log()
    assert_promises(daemon.data_dir, config, owner_ids, stranger_ids)


# -- kill -9 with Telegram ---------------------------------------------------------------
TG_OWNER = 1001
TG_STRANGERS = (2001, 2002)


def _tg_plain_sends(fake: Any, chat: int) -> int:
    """Messages the bot sent to ``chat`` other than escalations (those carry buttons)."""
    return sum(
        1
        for params in fake.calls_of("sendMessage")
        if str(params.get("chat_id")) == str(chat)
        and "inline_keyboard" not in (params.get("reply_markup") or {})
    )


def _outbox_sent_keys(data_dir: Path) -> Counter[str]:
    from tests.sqlite_driver import sqlite3

    conn = sqlite3.connect(f"file:{data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT dedup_key FROM outbox WHERE status = 'sent'").fetchall()
    finally:
        conn.close()
    return Counter(r[0] for r in rows if r[0])


async def test_kill9_with_telegram_loses_nothing(
    tmp_path: Path, daemons: list[DaemonProcess], telegram_fake: Any
) -> None:
    """Telegram's offset is the acknowledgement: updates the daemon confirmed before the
    crash are stored; the ones it had not confirmed come again and are stored once."""

    config = base_config(
        tmp_path,
        channels=fake_telegram(telegram_fake.base_url),
        owner={"identities": {"telegram": [str(TG_OWNER)]}},
    )
    daemon = await start_daemon(daemons, tmp_path, config, timeout=90)
    injected: list[tuple[int, int]] = []
    stop = asyncio.Event()

    async def inject() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            chat = TG_OWNER if n % 2 else TG_STRANGERS[n % 4 // 2]
            msg = telegram_fake.inject_message(chat, f"telegram {n}: tomatoes")
            injected.append((chat, msg["message_id"]))
            await asyncio.sleep(0.01)

    injector = asyncio.create_task(inject())

    def confirmed() -> int:
        return len(injected) - len(telegram_fake.pending_updates)

    await wait_until(lambda: confirmed() >= 40, 60, "confirmed updates", daemon)
    await daemon.kill9()
    await asyncio.sleep(0.2)  # messages keep arriving while the daemon is down
    stop.set()
    await injector
    await daemon.start(timeout=90)
    owner_msgs = [m for c, m in injected if c == TG_OWNER]
    await wait_until(
        lambda: (
            not telegram_fake.pending_updates
            and _tg_plain_sends(telegram_fake, TG_OWNER) >= len(owner_msgs)
        ),
        60,
        "every update confirmed and every owner message answered",
        daemon,
    )
    assert await daemon.terminate() == 0, daemon.log()
    data = daemon.data_dir
    owner_ids = {f"{TG_OWNER}:{m}" for m in owner_msgs}
    stranger_ids = {f"{c}:{m}" for c, m in injected if c != TG_OWNER}
    stored = stored_owner_ids(data)
    assert {m: stored[m] for m in owner_ids if stored[m] != 1} == {}
    strangers = stored_stranger_ids(data)
    assert {m: strangers[m] for m in stranger_ids if strangers[m] != 1} == {}
    for conv_id, turns in owner_turns(data).items():
        users = Counter(t["turnNumber"] for t in turns if t["role"] == "user")
        answers = Counter(t["turnNumber"] for t in turns if t["role"] == "assistant")
        assert answers == users, conv_id  # each message answered exactly once
    # Every user turn's reply went out through the outbox ...
    sent_keys = _outbox_sent_keys(data)
    for conv_id, turns in owner_turns(data).items():
        for t in turns:
            if t["role"] == "user":
                assert sent_keys[f"{conv_id}:{t['turnNumber']}:reply"] == 1, t
    # ... and reached Telegram. Telegram has no idempotency key: a crash between
    # sendMessage and the outbox's "sent" mark can repeat that one message, no other.
    sends = _tg_plain_sends(telegram_fake, TG_OWNER)
    assert len(owner_msgs) <= sends <= len(owner_msgs) + 1, (sends, len(owner_msgs))
    index = healthcheck.collect(build_config(config, env={}))["index"]
    assert index["ok"] and index["fts_integrity"] == "ok", index


# -- SIGTERM under load, SIGHUP ----------------------------------------------------------
async def test_sigterm_drains_in_flight_replies_and_exits_0(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    """Replies in progress at SIGTERM are finished or left pending, never lost: exit 0,
    and after the restart every message has exactly one reply."""
    from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted, last_user_text

    slow = [True]  # until the restart: then the pending replies need no model delay

    def slow_echo(body: dict[str, Any]) -> Scripted:
        delay = 0.3 if slow[0] else 0.0
        return Scripted([Block("text", text=f"echo: {last_user_text(body)[:200]}")], delay=delay)

    async with FakeAnthropicAPI(fallback="echo") as fake:
        for _ in range(400):
            fake.push(slow_echo)
        config = base_config(tmp_path, brain={"provider": "anthropic", "base_url": fake.base_url})
        daemon = await start_daemon(
            daemons, tmp_path, config, env={"ANTHROPIC_API_KEY": "test-key"}
        )
        loop = Loopback(daemon, session)
        owner_ids = set()
        for i in range(6):
            for owner in OWNERS:
                mid = f"{owner}-{i}"
                assert await loop.post(owner, f"question {i}", mid) == 200
                owner_ids.add(mid)
        # Replies are being generated (0.3 s each, one conversation at a time).
        assert await daemon.terminate() == 0, daemon.log()
        assert daemon.notify is not None
        daemon.notify.drain()
        assert "STOPPING" in daemon.notify.keys()
        answered_before = set(replies_by_message(daemon.data_dir))
        assert answered_before < owner_ids  # the stop really interrupted work
        slow[0] = False
        await daemon.start()
        await wait_replies(daemon, owner_ids, 60, "the pending replies after the restart")
        assert await daemon.terminate() == 0, daemon.log()
    assert_promises(daemon.data_dir, config, owner_ids, set(), env={"ANTHROPIC_API_KEY": "k"})


async def test_sighup_reloads_owner_identities_without_dropping_the_channel(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    import signal

    config = base_config(tmp_path)
    daemon = await start_daemon(daemons, tmp_path, config)
    loop = Loopback(daemon, session)
    port = (daemon.data_dir / "loopback.port").read_text()
    assert await loop.post("owner3", "hello?", "owner3-0") == 200  # a stranger for now
    await wait_until(
        lambda: any(r["kind"] == "acknowledgement" for r in sent(daemon.data_dir)),
        30,
        "the stranger's acknowledgement",
        daemon,
    )
    config["owner"]["identities"]["loopback"] = [*OWNERS, "owner3"]
    daemon.write_config()
    assert daemon.notify is not None and daemon.proc is not None
    seen = len(daemon.notify.messages)
    daemon.proc.send_signal(signal.SIGHUP)
    await daemon.notify.wait_for(lambda m: m.get("RELOADING") == "1", since=seen)
    await daemon.notify.wait_for(lambda m: m.get("READY") == "1", since=seen)
    # Same listener, same process: now owner3 is the owner and gets a reply.
    assert (daemon.data_dir / "loopback.port").read_text() == port
    assert await loop.post("owner3", "it is me", "owner3-1") == 200
    await wait_until(
        lambda: "owner3-1" in replies_by_message(daemon.data_dir), 30, "a reply", daemon
    )
    assert await daemon.terminate() == 0, daemon.log()
    assert stored_owner_ids(daemon.data_dir) == Counter({"owner3-1": 1})
    assert stored_stranger_ids(daemon.data_dir) == Counter({"owner3-0": 1})


# -- conversations.db deleted ----------------------------------------------------------
async def test_deleted_index_is_rebuilt_on_start(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    config = base_config(tmp_path)
    daemon = await start_daemon(daemons, tmp_path, config)
    loop = Loopback(daemon, session)
    owner_ids = set()
    for i in range(4):
        for owner in OWNERS:
            mid = f"{owner}-{i}"
            assert await loop.post(owner, f"note {i}: the boiler pressure is low", mid) == 200
            owner_ids.add(mid)
    for s in STRANGERS:
        assert await loop.post(s, "hello, is Robin there?", f"{s}-0") == 200
    await wait_replies(daemon, owner_ids, 30)
    assert await daemon.terminate() == 0, daemon.log()
    before = healthcheck.collect(build_config(config, env={}))

    index_path = daemon.data_dir / "conversations" / "conversations.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index_path}{suffix}").unlink(missing_ok=True)
    gone = healthcheck.collect(build_config(config, env={}))
    assert any("conversations.db is missing" in p for p in gone["problems"])

    await daemon.start()
    # Pinned conversations survive the rebuild: the next message continues the same one.
    assert await loop.post("owner", "one more about the boiler", "owner-after") == 200
    owner_ids.add("owner-after")
    await wait_replies(daemon, owner_ids, 30)
    assert await daemon.terminate() == 0, daemon.log()
    after = healthcheck.collect(build_config(config, env={}))
    # Both owner identities are one person: one pinned conversation on the channel.
    assert after["counts"]["conversations"] == before["counts"]["conversations"] == 1
    assert after["counts"]["external_parties"] == before["counts"]["external_parties"] == 3
    assert after["counts"]["turns"] == before["counts"]["turns"] + 2
    assert_promises(daemon.data_dir, config, owner_ids, {f"{s}-0" for s in STRANGERS})
    # Keyword search over the rebuilt FTS index finds the old turns.
    proc = subprocess.run(
        [
            *daemon_cli(),
            "--config",
            str(daemon.config_path),
            "search",
            "boiler pressure",
            "--json",
            "--limit",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=daemon._env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "boiler" in proc.stdout


def daemon_cli() -> list[str]:
    import sys

    return [sys.executable, "-m", "bot.cli"]


# -- full disk -------------------------------------------------------------------------
async def test_full_disk_keeps_messages_retries_and_tells_the_owner(
    tmp_path: Path,
    session: aiohttp.ClientSession,
    daemons: list[DaemonProcess],
    telegram_fake: Any,
) -> None:

    data = tmp_path / "data"
    mount_tmpfs(data, "24m")
    try:
        config = base_config(
            tmp_path,
            channels=fake_telegram(telegram_fake.base_url, loopback=True),
            owner={"identities": {"loopback": list(OWNERS), "telegram": ["1001"]}},
            trust={"escalation_channel": "telegram"},
        )
        daemon = await start_daemon(daemons, tmp_path, config, timeout=90)
        loop = Loopback(daemon, session)
        assert await loop.post("owner", "before the disk fills", "owner-0") == 200
        await wait_until(lambda: "owner-0" in replies_by_message(data), 30, "a reply", daemon)

        filler = fill_disk(data)
        # While the disk is full a delivery cannot be made durable: the daemon holds the
        # message in memory and the channel is told so (202: held, not durable; a 503
        # "retry" made a client without ids send it again and it was stored twice).
        full = [f"owner-full-{i}" for i in range(3)]
        # Larger than a page: a file's slack in its last block cannot absorb it.
        bulk = " ".join(["tomato"] * 2000)
        statuses = await asyncio.gather(
            *(loop.post("owner", f"written while the disk is full {m} {bulk}", m) for m in full)
        )
        assert statuses == [202, 202, 202], statuses
        await telegram_fake.wait_sent(1001, 1, timeout=30)
        alert = telegram_fake.sent_to(1001)[0]
        assert "stor" in alert["text"].lower() or "disk" in alert["text"].lower(), alert
        assert daemon.proc is not None and daemon.proc.returncode is None  # still running

        filler.unlink()  # space comes back: the held messages are stored and answered
        owner_ids = {"owner-0", *full}
        await wait_until(
            lambda: set(stored_owner_ids(data)) >= owner_ids, 60, "held messages stored", daemon
        )
        await wait_replies(daemon, owner_ids, 60, "their replies", data_dir=data)
        # A redelivery by the channel after space came back is not stored twice.
        for mid in full:
            assert await loop.post("owner", f"redelivered {mid}", mid) == 200
        assert await daemon.terminate() == 0, daemon.log()
        assert_promises(data, config, owner_ids, set())
        # One alert for the episode, not one per message.
        assert len(telegram_fake.sent_to(1001)) == 1
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)


async def test_a_start_on_a_full_disk_waits_for_space_and_then_serves(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    """Regression: a daemon (re)started while the disk was full exited 74 at once with
    "move conversations.db aside"; systemd restarted it every 5 s and gave up after 5
    starts in 300 s (StartLimitBurst), so it stayed down once space came back."""
    data = tmp_path / "data"
    mount_tmpfs(data, "24m")
    try:
        config = base_config(tmp_path)
        daemon = await start_daemon(daemons, tmp_path, config)
        loop = Loopback(daemon, session)
        assert await loop.post("owner", "before the disk fills", "owner-0") == 200
        await wait_until(lambda: "owner-0" in replies_by_message(data), 30, "a reply", daemon)
        assert await daemon.terminate() == 0, daemon.log()

        filler = fill_disk(data)
        await daemon.start(wait_ready=False)
        await wait_until(
            lambda: "cannot open the store" in daemon.log(), 30, "the store's refusal", daemon
        )
        await asyncio.sleep(1.5)
        assert daemon.proc is not None and daemon.proc.returncode is None, daemon.log()
        assert "free in" in daemon.log() and "move it aside" not in daemon.log()

        filler.unlink()  # space comes back: the daemon starts by itself
        await daemon.wait_ready(timeout=30)
        assert await loop.post("owner", "after the disk had room again", "owner-1") == 200
        await wait_until(lambda: "owner-1" in replies_by_message(data), 30, "a reply", daemon)
        assert await daemon.terminate() == 0, daemon.log()
        assert_promises(data, config, {"owner-0", "owner-1"}, set())
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)


# -- Anthropic down for 60 (simulated) seconds -----------------------------------------
SCALE = 40.0  # 60 simulated seconds last 1.5 real seconds


async def test_anthropic_outage_loses_nothing_and_answers_once(
    tmp_path: Path, session: aiohttp.ClientSession, daemons: list[DaemonProcess]
) -> None:
    from bot.bench.fakes.anthropic_api import FakeAnthropicAPI

    async with FakeAnthropicAPI(fallback="echo") as fake:
        config = base_config(
            tmp_path,
            brain={
                "provider": "anthropic",
                "base_url": fake.base_url,
                # The production defaults, scaled down together.
                "retry_budget_seconds": 60.0 / SCALE,
                "pending_retry_interval": 30.0 / SCALE,
                "retry_base_delay": 0.5 / SCALE,
                "retry_max_delay": 8.0 / SCALE,
            },
        )
        daemon = await start_daemon(
            daemons, tmp_path, config, env={"ANTHROPIC_API_KEY": "test-key"}
        )
        loop = Loopback(daemon, session)
        fake.down_for(60.0 / SCALE)
        owner_ids = set()
        posts: list[Awaitable[int | None]] = []
        for i in range(3):
            for owner in OWNERS:
                mid = f"{owner}-{i}"
                owner_ids.add(mid)
                posts.append(loop.post(owner, f"question {i} from {owner}", mid))
        assert await asyncio.gather(*posts) == [200] * len(owner_ids)
        await wait_replies(daemon, owner_ids, 60, "a reply to every message after the outage")
        # The outage was hit: more requests than messages (retries), all answered after.
        assert len(fake.requests) > len(owner_ids)
        assert await daemon.terminate() == 0, daemon.log()
    assert_promises(daemon.data_dir, config, owner_ids, set(), env={"ANTHROPIC_API_KEY": "k"})
    # The replies are the model's, not an apology; at most one outage notice per message.
    for conv_turns in owner_turns(daemon.data_dir).values():
        for t in conv_turns:
            if t["role"] == "assistant":
                assert t["content"].startswith("echo: "), t
    notices = Counter(r["chat"] for r in sent(daemon.data_dir) if r["kind"] == "notice")
    assert sum(notices.values()) <= len(owner_ids)


# -- the soak benchmark, briefly -------------------------------------------------------
async def test_soak_bench_smoke(tmp_path: Path) -> None:
    """``my-agent bench soak`` end to end for a few seconds: no errors, all handled."""
    import argparse

    from bot.bench import soak

    parser = argparse.ArgumentParser()
    soak.add_arguments(parser)
    args = parser.parse_args(
        ["--seconds", "2", "--warmup", "1", "--rate", "10", "--telegram-rate", "3",
         "--web-clients", "1", "--search-every", "3", "--data-dir", str(tmp_path)]
    )  # fmt: skip
    result = await soak.run(args)
    assert result["errors"] == {}, result
    assert result["exit_code"] == 0 and result["replies_drained"]
    handled = result["messages_handled"]
    assert handled["loopback_owner"] > 0 and handled["loopback_search"] > 0
    # one reply per message, or per burst (the Telegram debounce): none lost, none twice
    tg_sent = result["messages_sent"]["telegram_owner"]
    assert handled["telegram_owner_replies"] + handled["telegram_owner_merged"] == tg_sent > 0
    assert handled["telegram_owner_replies"] > 0
    assert handled["web_requests"] > 0
    assert result["rss_kib"]["start"] > 0 and result["ingest_latency_ms"]["n"] > 0
