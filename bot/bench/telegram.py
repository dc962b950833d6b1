"""``my-agent bench telegram``: owner messages through Telegram vs the bare router.

Two stacks run the real core (store with fsync, index, router, reply engine, outbox) and
the offline brain, each in a child process so the measuring side never shares their
event loop:

* **bare**: messages are handed to ``router.deliver`` directly and a recording channel
  notes when the outbox hands it the reply (the child measures itself);
* **telegram**: the real :class:`~channels.telegram.adapter.TelegramChannel` long-polls
  the fake Bot API server that runs in this process; a message is timed from the moment
  it is queued on the fake server to the moment the reply's ``sendMessage`` arrives.

For each stack: **latency** (one message at a time, median / p99) and **throughput**
(``--messages`` queued at once, owner messages per second until the last reply). All
messages go to the owner's single pinned conversation, where replies are produced one at
a time, as they would be for a real owner. The report gives both side by side, the
channel's added latency (telegram - bare) and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

OWNER_ID = 1001
WARMUP = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--samples", type=int, default=60,
        help="messages timed one at a time for latency (default 60)",
    )  # fmt: skip
    parser.add_argument(
        "--messages", type=int, default=300,
        help="messages queued at once for throughput (default 300)",
    )  # fmt: skip
    parser.add_argument(
        "--fsync", choices=["always", "never"], default="always",
        help="transcript fsync policy of the measured daemons (default always)",
    )  # fmt: skip
    parser.add_argument(
        "--data-dir", default=None,
        help="where the two bench daemons keep their data (default: a temp dir)",
    )  # fmt: skip


def _summary(values_ms: list[float]) -> dict[str, float | int]:
    ordered = sorted(values_ms)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(pct(0.99), 2),
        "min_ms": round(ordered[0], 2),
        "max_ms": round(ordered[-1], 2),
    }


def _recv(conn: Connection, proc: Any, timeout: float) -> Any:
    """Receive from a child, failing (instead of hanging) if it dies or times out."""
    deadline = time.monotonic() + timeout
    while not conn.poll(0.2):
        if not proc.is_alive():
            raise RuntimeError(f"bench child exited with code {proc.exitcode}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise TimeoutError("bench child did not answer in time")
    return conn.recv()


def _config(data_dir: Path, fsync: str, base_url: str | None) -> Any:
    from bot.config.model import AppConfig

    tree: dict[str, Any] = {
        "data_dir": str(data_dir),
        # no debounce: the bench times the channel per message (a burst answered once,
        # brain.debounce_seconds, would time the wait instead)
        "brain": {"provider": "offline", "debounce_seconds": {}},
        "embedding": {"enabled": False},
        "transcripts": {"fsync": fsync},
        "owner": {"identities": {"telegram": [str(OWNER_ID)]}},
        "channels": {"web": {"enabled": False}},
    }
    if base_url is not None:
        from bot.bench.fakes.telegram_api import TOKEN

        tree["channels"]["telegram"] = {
            "enabled": True, "token": TOKEN, "api_base": base_url, "polling_timeout": 30,
        }  # fmt: skip
    return AppConfig.model_validate(tree)


# -- child: the bare router ----------------------------------------------------------------
def _bare_child(data_dir: str, fsync: str, samples: int, messages: int, conn: Connection) -> None:
    conn.send(asyncio.run(_bare(Path(data_dir), fsync, samples, messages)))


async def _bare(data_dir: Path, fsync: str, samples: int, messages: int) -> dict[str, Any]:
    from bot.events import InboundMessage, OutboundMessage, SendResult
    from bot.services import close_services, open_services

    services = await open_services(_config(data_dir, fsync, None))
    replies: list[float] = []
    wake = asyncio.Event()

    class Recorder:
        name = "telegram"
        supports_streaming = False

        async def start(self, host: Any) -> None: ...
        async def stop(self) -> None: ...

        async def send(self, msg: OutboundMessage) -> SendResult:
            if msg.kind == "reply":
                replies.append(time.monotonic())
                wake.set()
            return SendResult(message_ref=f"r{len(replies)}")

    channel = Recorder()
    services.channels["telegram"] = channel  # type: ignore[assignment]
    services.outbox.attach(channel)  # type: ignore[arg-type]
    counter = 0

    async def one(text: str) -> float:
        nonlocal counter
        counter += 1
        t0 = time.monotonic()
        await services.router.deliver(InboundMessage(
            channel="telegram", sender_id=str(OWNER_ID), chat_id=str(OWNER_ID), text=text,
            message_id=f"{OWNER_ID}:{counter}"))  # fmt: skip
        while len(replies) < counter:
            wake.clear()
            await wake.wait()
        return (replies[counter - 1] - t0) * 1000

    try:
        for i in range(WARMUP):
            await one(f"warm-up {i} about the garden")
        latencies = [await one(f"question {i} about the garden") for i in range(samples)]
        start = time.monotonic()
        base = counter
        for i in range(messages):
            counter += 1
            await services.router.deliver(InboundMessage(
                channel="telegram", sender_id=str(OWNER_ID), chat_id=str(OWNER_ID),
                text=f"burst {i} about the roses", message_id=f"{OWNER_ID}:{counter}"))  # fmt: skip
        while len(replies) < base + messages:
            wake.clear()
            await wake.wait()
        elapsed = replies[-1] - start
    finally:
        await close_services(services)
    return {"latency": latencies, "elapsed": elapsed}


# -- child: the daemon with the Telegram channel ------------------------------------------
def _telegram_child(data_dir: str, fsync: str, base_url: str, conn: Connection) -> None:
    asyncio.run(_telegram_daemon(Path(data_dir), fsync, base_url, conn))


async def _telegram_daemon(data_dir: Path, fsync: str, base_url: str, conn: Connection) -> None:
    from bot.services import close_services, open_services
    from channels.telegram.adapter import TelegramChannel

    config = _config(data_dir, fsync, base_url)
    services = await open_services(config)
    channel = TelegramChannel(config, services)
    services.channels["telegram"] = channel
    services.outbox.attach(channel)
    await channel.start(services.router)
    services.ready = True
    conn.send("ready")
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    await channel.stop()
    await close_services(services)


async def _telegram(data_dir: Path, fsync: str, samples: int, messages: int) -> dict[str, Any]:
    from bot.bench.fakes.telegram_api import FakeTelegramServer

    server = FakeTelegramServer()
    base_url = await server.start()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_telegram_child, args=(str(data_dir), fsync, base_url, child))
    proc.start()
    loop = asyncio.get_running_loop()
    try:
        ready = await loop.run_in_executor(None, _recv, parent, proc, 120)
        assert ready == "ready"
        sent_at: list[float] = []

        def replies() -> int:
            sent_at[:] = [c.at for c in server.calls if c.method.lower() == "sendmessage"
                          and c.params.get("chat_id") == str(OWNER_ID)]  # fmt: skip
            return len(sent_at)

        async def one(text: str) -> float:
            before = replies()
            t0 = time.monotonic()
            server.inject_message(OWNER_ID, text)
            await server.wait_sent(OWNER_ID, before + 1, timeout=60)
            replies()
            return (sent_at[before] - t0) * 1000

        for i in range(WARMUP):
            await one(f"warm-up {i} about the garden")
        latencies = [await one(f"question {i} about the garden") for i in range(samples)]
        base = replies()
        start = time.monotonic()
        for i in range(messages):
            server.inject_message(OWNER_ID, f"burst {i} about the roses")
        await server.wait_sent(OWNER_ID, base + messages, timeout=600)
        replies()
        elapsed = sent_at[-1] - start
        polls = len(server.calls_of("getUpdates"))
    finally:
        parent.send("stop")
        await loop.run_in_executor(None, proc.join, 60)
        await server.close()
    return {"latency": latencies, "elapsed": elapsed, "polls": polls}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both stacks one after the other and report them side by side."""
    with tempfile.TemporaryDirectory(prefix="bench-telegram-") as tmp:
        root = Path(args.data_dir) if args.data_dir else Path(tmp)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_bare_child,
            args=(str(root / "bare"), args.fsync, args.samples, args.messages, child),
        )
        proc.start()
        loop = asyncio.get_running_loop()
        bare = await loop.run_in_executor(None, _recv, parent, proc, 1800)
        await loop.run_in_executor(None, proc.join, 60)
        tg = await _telegram(root / "telegram", args.fsync, args.samples, args.messages)

    bare_lat, tg_lat = _summary(bare["latency"]), _summary(tg["latency"])
    bare_rate = args.messages / bare["elapsed"]
    tg_rate = args.messages / tg["elapsed"]
    return {
        "benchmark": "telegram",
        "brain": "offline",
        "fsync": args.fsync,
        "latency_one_at_a_time": {"bare_router": bare_lat, "telegram": tg_lat},
        "added_latency_ms": {
            "median": round(tg_lat["median_ms"] - bare_lat["median_ms"], 2),
            "p99": round(tg_lat["p99_ms"] - bare_lat["p99_ms"], 2),
        },
        "latency_ratio_median": round(tg_lat["median_ms"] / bare_lat["median_ms"], 2),
        "throughput_msgs_per_s": {
            "bare_router": round(bare_rate, 1),
            "telegram": round(tg_rate, 1),
            "ratio": round(tg_rate / bare_rate, 2),
            "messages": args.messages,
        },
        "getUpdates_calls": tg["polls"],
    }
