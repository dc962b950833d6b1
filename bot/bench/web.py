"""``my-agent bench web``: dashboard latency and WebSocket fan-out.

The daemon side (real core, offline brain, the web channel: :mod:`bot.bench.web_daemon`)
runs in a child process so that the measuring clients never share its event loop. Two
figures:

1. **First token**: time from sending ``send_message`` on the WebSocket to the first
   ``stream`` frame of the reply (offline brain), median and p95. Baseline in the same
   run: the WebSocket ``ping``/``pong`` round trip on the same connection.
2. **Fan-out**: clients are ramped up (all viewing the same conversation, like tabs after
   a refresh); at each level one client sends a message and we time, for every client,
   the arrival of the broadcast ``conversation_updated`` carrying that turn. The largest
   level whose p99 stays under ``--threshold-ms`` is reported. Baseline: the 1-client level.

The measured path includes the durable append (fsync of the transcript, index update),
so it is what a tab really waits for. All clients live in one process: its own receive
work is part of the figure, which makes it an upper bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

from bot.bench.web_daemon import raise_fd_limit, serve

DEFAULT_LEVELS = "1,25,50,100,200,400,600,800,1000,1200,1500,2000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--messages",
        type=int,
        default=30,
        help="messages timed for the first-token figure (default 30)",
    )
    parser.add_argument(
        "--levels",
        default=DEFAULT_LEVELS,
        help=f"client counts to ramp through (default {DEFAULT_LEVELS})",
    )
    parser.add_argument(
        "--broadcasts", type=int, default=15, help="broadcasts timed per level (default 15)"
    )
    parser.add_argument(
        "--threshold-ms",
        type=float,
        default=100.0,
        help="p99 broadcast latency budget (default 100 ms)",
    )
    parser.add_argument(
        "--data-dir", default=None, help="data directory for the bench daemon (default: a temp dir)"
    )


def _summary(values_ms: list[float]) -> dict[str, float | int]:
    if not values_ms:
        return {"n": 0}
    ordered = sorted(values_ms)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    return {
        "n": len(ordered),
        "median": round(statistics.median(ordered), 2),
        "p95": round(pct(95), 2),
        "p99": round(pct(99), 2),
        "max": round(ordered[-1], 2),
    }


class _Tab:
    """A lean measuring client: raw frames are only parsed when they may matter."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.waiters: dict[str, asyncio.Future[float]] = {}
        self.frames: asyncio.Queue[tuple[float, str]] = asyncio.Queue()
        self.keep = False
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            now = time.perf_counter()
            data = msg.data if isinstance(msg.data, str) else ""
            for marker, fut in list(self.waiters.items()):
                if marker in data and not fut.done():
                    fut.set_result(now)
                    del self.waiters[marker]
            if self.keep:
                self.frames.put_nowait((now, data))

    def expect(self, marker: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[marker] = fut
        return fut

    async def next_frame(self, kind: str, timeout: float = 10.0) -> tuple[float, dict[str, Any]]:
        while True:
            at, data = await asyncio.wait_for(self.frames.get(), timeout)
            frame = json.loads(data)
            if frame.get("type") == kind:
                return at, frame

    async def send(self, **payload: Any) -> None:
        await self.ws.send_str(json.dumps(payload))

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


async def _first_token(session: Any, url: str, origin: str, messages: int) -> dict[str, Any]:
    tab = _Tab(await session.ws_connect(f"{url}/ws", headers={"Origin": origin}))
    tab.keep = True
    await tab.next_frame("conversation_list")
    first: list[float] = []
    rtt: list[float] = []
    for i in range(messages + 1):  # the first message creates the conversation: warm-up
        t0 = time.perf_counter()
        await tab.send(type="send_message", text=f"benchmark question {i} about the garden")
        while True:
            at, frame = await tab.next_frame("stream")
            if not frame["done"]:
                break
        if i:
            first.append((at - t0) * 1000)
        while not (await tab.next_frame("stream"))[1]["done"]:
            pass
        t0 = time.perf_counter()
        await tab.send(type="ping", t=i)
        at, _ = await tab.next_frame("pong")
        rtt.append((at - t0) * 1000)
    await tab.close()
    return {"first_token_ms": _summary(first), "ws_ping_rtt_ms": _summary(rtt)}


async def _measure_level(trigger: _Tab, tabs: list[_Tab], broadcasts: int) -> dict[str, Any]:
    """Time ``broadcasts`` turns from ``trigger`` arriving at every tab."""
    latencies: list[float] = []
    lost = 0
    for _ in range(broadcasts):
        marker = f"fanout-{uuid.uuid4().hex}"
        futures = [t.expect(marker) for t in tabs]
        t0 = time.perf_counter()
        await trigger.send(type="send_message", text=f"{marker} status update")
        done, pending = await asyncio.wait(futures, timeout=5.0)
        latencies.extend((f.result() - t0) * 1000 for f in done)
        lost += len(pending)
        for f in pending:
            f.cancel()
        # Let the reply stream finish before the next broadcast.
        while not (await trigger.next_frame("stream", timeout=30.0))[1]["done"]:
            pass
        await asyncio.sleep(0.05)  # the reply's own frames drain before the next one
    return {"clients": len(tabs), **_summary(latencies), "lost": lost}


async def _fan_out(
    session: Any, url: str, origin: str, levels: list[int], broadcasts: int, threshold: float
) -> dict[str, Any]:
    tabs: list[_Tab] = []
    trigger = _Tab(await session.ws_connect(f"{url}/ws", headers={"Origin": origin}))
    trigger.keep = True
    await trigger.next_frame("conversation_list")
    results = []
    best = 0
    for level in levels:
        while len(tabs) < level:
            batch = min(50, level - len(tabs))
            opened = await asyncio.gather(
                *(
                    session.ws_connect(f"{url}/ws", headers={"Origin": origin}, heartbeat=None)
                    for _ in range(batch)
                )
            )
            fresh = [_Tab(ws) for ws in opened]
            # Wait until each new tab has its initial state: connecting is not measured.
            await asyncio.wait_for(
                asyncio.gather(*(t.expect('"conversation_list"') for t in fresh)), 30
            )
            tabs.extend(fresh)
        row = await _measure_level(trigger, tabs, broadcasts)
        if row["lost"] or row.get("p99", float("inf")) >= threshold:
            # One fsync stall on a shared machine delays every tab at once; measure the
            # level again before calling it the limit, and report both runs.
            retry = await _measure_level(trigger, tabs, broadcasts)
            row["first_attempt"] = dict(row)
            row.update(retry)
            row["retried"] = True
        results.append(row)
        if row["lost"] == 0 and row.get("p99", float("inf")) < threshold:
            best = level
        else:
            break  # past the budget twice: the next level would only be worse
    for tab in [*tabs, trigger]:
        await tab.close()
    return {"levels": results, "max_clients_within_budget": best, "threshold_ms": threshold}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the bench daemon in a child process, measure, stop it, return the figures."""
    import aiohttp

    fd_limit = raise_fd_limit()
    levels = [int(x) for x in str(args.levels).split(",") if x.strip()]
    tmp = None
    data_dir = args.data_dir
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="my-agent-bench-web-")
        data_dir = tmp.name
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(data_dir, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the bench daemon did not start within 60 s")
        url, token = parent.recv()
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True)
        ) as session:
            async with session.post(f"{url}/login", json={"token": token}) as r:
                r.raise_for_status()
            latency = await _first_token(session, url, url, args.messages)
            fan_out = await _fan_out(session, url, url, levels, args.broadcasts, args.threshold_ms)
    finally:
        parent.send("stop")
        proc.join(15)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        if tmp is not None:
            tmp.cleanup()
    return {
        "name": "web",
        **latency,
        "fan_out": fan_out,
        "environment": {
            "cpus": os.cpu_count(),
            "fd_limit": fd_limit,
            "brain": "offline",
            "transcript_fsync": "always",
        },
    }


if __name__ == "__main__":  # python -m bot.bench.web
    _parser = argparse.ArgumentParser(prog="bench web")
    add_arguments(_parser)
    print(json.dumps(asyncio.run(run(_parser.parse_args())), indent=2))
