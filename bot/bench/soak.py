"""``my-agent bench soak``: the real daemon under a steady mixed load for a while.

A daemon child process (``python -m bot.cli run``, offline brain unless ``--brain fake``,
fresh data directory) receives, for ``--seconds``:

- owner and stranger messages through the loopback channel (each POST returns when the
  message is durable: its duration is the **ingest latency**), every ``--search-every``-th
  owner message being ``/search`` (the hybrid search the agent uses);
- owner and stranger messages through the fake Telegram Bot API (the real aiogram client
  in the daemon long-polls it);
- web clients: a logged-in dashboard session listing conversations and searching
  through the HTTP API, plus ``/readyz``.

Reported: messages sent and handled per path, errors (goal 0: a non-200 ingest, a
missing or duplicated reply, a failed web request, a non-zero exit), the daemon's RSS
after warm-up and at the end (goal: growth under 10%), ingest latency percentiles, and
the daemon's exit status after SIGTERM. The load itself is :mod:`bot.bench.soak_load`,
the checks :mod:`bot.bench.soak_checks`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bot.bench.pymap_server import free_port
from bot.bench.soak_checks import drain, verify
from bot.bench.soak_load import TELEGRAM_OWNER, Load, loopback_worker, telegram_worker, web_worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration (60)")
    parser.add_argument("--warmup", type=float, default=5.0, help="load before RSS baseline")
    parser.add_argument("--owners", type=int, default=2, help="owner identities (loopback)")
    parser.add_argument("--strangers", type=int, default=4, help="third parties (loopback)")
    parser.add_argument("--rate", type=float, default=20.0, help="loopback messages/s in total")
    parser.add_argument("--telegram-rate", type=float, default=4.0, help="Telegram msgs/s")
    parser.add_argument("--web-clients", type=int, default=2, help="dashboard API clients")
    parser.add_argument("--search-every", type=int, default=10, help="every Nth owner msg")
    parser.add_argument("--brain", choices=("offline", "fake"), default="offline")
    parser.add_argument("--data-dir", default=None, help="default: a temporary directory")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)

    return {"n": len(ordered), "p50": pct(50), "p95": pct(95), "p99": pct(99),
            "max": round(ordered[-1], 2)}  # fmt: skip


async def _wait_ready(proc: asyncio.subprocess.Process, data_dir: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    status = data_dir / "daemon.json"
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode} before it was ready")
        try:
            if json.loads(status.read_text()).get("state") == "ready":
                return
        except (OSError, ValueError):
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"daemon not ready within {timeout}s")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from bot.bench.fakes.telegram_api import TOKEN, FakeTelegramServer

    root = Path(args.data_dir or tempfile.mkdtemp(prefix="my-agent-soak-"))
    data_dir = root / "data"
    owners = [f"owner{i}" for i in range(args.owners)]
    strangers = [f"stranger{i}" for i in range(args.strangers)]
    telegram = FakeTelegramServer()
    await telegram.start()
    fake_api: Any = None
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env.pop("ANTHROPIC_API_KEY", None)
    web_port = free_port()
    config: dict[str, Any] = {
        "data_dir": str(data_dir),
        "owner": {"identities": {"loopback": owners, "telegram": [str(TELEGRAM_OWNER)]}},
        "channels": {
            "web": {"enabled": True, "port": web_port},
            # Every reply of the run is counted from loopback-sent.jsonl: never cut.
            "loopback": {"enabled": True, "sent_max_bytes": 0},
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "api_base": telegram.base_url,
                "polling_timeout": 5,
            },
        },
        "embedding": {"enabled": False},
        "logging": {"level": "WARNING"},
    }
    if args.brain == "fake":
        from bot.bench.fakes.anthropic_api import FakeAnthropicAPI

        fake_api = FakeAnthropicAPI(fallback="echo")
        await fake_api.start()
        config["brain"] = {"provider": "anthropic", "base_url": fake_api.base_url}
        env["ANTHROPIC_API_KEY"] = "soak-key"
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = root / "daemon.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            "--config",
            str(config_path),
            cwd=str(root),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    load = Load()
    result: dict[str, Any] = {"seconds": args.seconds, "data_dir": str(root)}
    try:
        await _wait_ready(proc, data_dir, 120)
        loop_url = f"http://127.0.0.1:{(data_dir / 'loopback.port').read_text().strip()}"
        web_url = f"http://127.0.0.1:{web_port}"
        token = (data_dir / "web_token").read_text().strip()
        senders = [(s, True) for s in owners] + [(s, False) for s in strangers]
        interval = len(senders) / args.rate if args.rate > 0 else 1.0
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            tasks = [
                asyncio.create_task(
                    loopback_worker(load, session, loop_url, s, owner, interval, args.search_every)
                )
                for s, owner in senders
            ]
            if args.telegram_rate > 0:
                tasks.append(
                    asyncio.create_task(telegram_worker(load, telegram, 1 / args.telegram_rate))
                )
            for _ in range(args.web_clients):
                tasks.append(asyncio.create_task(web_worker(load, web_url, token)))
            await asyncio.sleep(args.warmup)
            rss_start = _rss_kib(proc.pid)
            load.latencies_ms.clear()
            await asyncio.sleep(args.seconds)
            load.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Let the replies drain, then read what was sent.
            drained = await drain(load, data_dir, telegram, 60)
            rss_end = _rss_kib(proc.pid)
        result.update(verify(load, data_dir, telegram, drained))
        growth = (rss_end - rss_start) / rss_start * 100 if rss_start else 0.0
        result["rss_kib"] = {"start": rss_start, "end": rss_end, "growth_pct": round(growth, 1)}
        result["ingest_latency_ms"] = _percentiles(load.latencies_ms)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await telegram.close()
        if fake_api is not None:
            await fake_api.close()
    result["exit_code"] = proc.returncode
    if proc.returncode != 0:
        load.errors["daemon_exit"] += 1
    result["errors"] = dict(load.errors)
    result["error_count"] = sum(load.errors.values())
    result["goals"] = {
        "errors_zero": result["error_count"] == 0,
        "rss_growth_under_10pct": result.get("rss_kib", {}).get("growth_pct", 100) < 10,
    }
    if args.data_dir is None and result["error_count"] == 0:
        shutil.rmtree(root, ignore_errors=True)  # kept when something went wrong
        result["data_dir"] = None
    return result
