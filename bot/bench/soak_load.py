"""The load of ``my-agent bench soak`` (bot.bench.soak): the tasks that send messages
and browse the dashboard for the length of a run, and the counters they share.

- :func:`loopback_worker`: one sender's messages POSTed to the loopback channel (each
  POST returns when the message is durable: its duration is the ingest latency), every
  ``search_every``-th owner message a ``/search``;
- :func:`telegram_worker`: owner and stranger messages through the fake Bot API;
- :func:`web_worker`: a logged-in dashboard session listing, searching and probing.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp

TELEGRAM_OWNER = 1001
TELEGRAM_STRANGERS = (2001, 2002, 2003)


class Load:
    """Counters shared by the load tasks."""

    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.sent: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.owner_ids: list[str] = []
        self.search_ids: list[str] = []
        self.stop = asyncio.Event()


async def loopback_worker(
    load: Load, session: aiohttp.ClientSession, url: str, sender: str, owner: bool,
    interval: float, search_every: int,
) -> None:  # fmt: skip
    n = 0
    while not load.stop.is_set():
        n += 1
        mid = f"{sender}-{n}"
        search = owner and search_every > 0 and n % search_every == 0
        text = "/search tomatoes" if search else f"note {n} from {sender}: tomatoes need water"
        started = time.perf_counter()
        try:
            async with session.post(
                f"{url}/inbound", json={"sender": sender, "text": text, "message_id": mid}
            ) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            ok = False
        load.latencies_ms.append((time.perf_counter() - started) * 1000)
        kind = "search" if search else ("owner" if owner else "stranger")
        load.sent[f"loopback_{kind}"] += 1
        if not ok:
            load.errors["loopback_ingest"] += 1
        elif search:
            load.search_ids.append(mid)
        elif owner:
            load.owner_ids.append(mid)
        await asyncio.sleep(interval)


async def telegram_worker(load: Load, fake: Any, interval: float) -> None:
    n = 0
    while not load.stop.is_set():
        n += 1
        owner = n % 2 == 0
        chat = TELEGRAM_OWNER if owner else TELEGRAM_STRANGERS[n % len(TELEGRAM_STRANGERS)]
        fake.inject_message(chat, f"telegram note {n}: the tomatoes are ripe")
        load.sent["telegram_owner" if owner else "telegram_stranger"] += 1
        await asyncio.sleep(interval)


async def web_worker(load: Load, url: str, token: str) -> None:
    # unsafe=True: keep the session cookie set by an IP-address host (127.0.0.1).
    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, cookie_jar=jar) as session:
        async with session.post(f"{url}/login", json={"token": token}) as resp:
            if resp.status != 200:
                load.errors["web_login"] += 1
                return
        await _browse(load, session, url)


async def _browse(load: Load, session: aiohttp.ClientSession, url: str) -> None:
    while not load.stop.is_set():
        for path in ("/api/conversations", "/api/search?q=tomatoes", "/readyz"):
            try:
                async with session.get(url + path) as resp:
                    await resp.read()
                    if resp.status != 200:
                        load.errors[f"web {path.split('?')[0]} {resp.status}"] += 1
            except (aiohttp.ClientError, OSError, TimeoutError):
                load.errors[f"web {path.split('?')[0]} failed"] += 1
            load.sent["web_requests"] += 1
        await asyncio.sleep(0.5)
