"""``my-agent bench email``: the e-mail channel end to end on local servers.

A pymap IMAP server (subprocess, in-memory) and an aiosmtpd SMTP server (in-process)
stand in for the mail provider; the real core (router, transcripts, index, outbox) with
the offline brain answers, through the real :class:`channels.email.EmailChannel` with
aioimaplib and aiosmtplib. Two measures, in one run:

- **throughput**: ``--mails`` owner mails are APPENDed before the channel starts; the
  clock runs from the start until every reply has reached the SMTP server
  (mails per second, end to end: fetch, parse, durable transcript, index, brain, outbox,
  SMTP);
- **latency**: one mail at a time, the delay from the APPEND command to the reply
  arriving at the SMTP server, with IMAP IDLE and with polling every
  ``--poll-interval`` seconds (median and p95 over ``--samples`` mails).

Needs the test extras (``pip install my-agent[test]``: pymap, aiosmtpd).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from bot.bench.pymap_server import PASSWORD, USER, start_pymap

OWNER = "owner@example.org"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mails", type=int, default=50, help="mails for the throughput run")
    parser.add_argument("--samples", type=int, default=15, help="mails per latency mode")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="seconds between checks in the polling mode",
    )


class _Sink:
    """aiosmtpd handler: the arrival time of every reply, by the mail it answers."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        from email import message_from_bytes, policy

        msg = message_from_bytes(envelope.original_content or b"", policy=policy.default)
        self.arrived[str(msg.get("In-Reply-To", ""))] = time.perf_counter()
        self.changed.set()
        return "250 OK"

    async def wait(self, keys: set[str], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not keys <= self.arrived.keys():
                self.changed.clear()
                await self.changed.wait()


def _mail(tag: str, n: int) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Owner <{OWNER}>"
    msg["To"] = USER
    msg["Subject"] = f"Bench {tag} {n}"
    msg["Message-ID"] = f"<bench-{tag}-{n}@example.org>"
    msg["Authentication-Results"] = "mx.bench; dkim=pass header.d=example.org"
    msg.set_content(f"Please remind me about the plumber invoice number {n} on Friday.")
    return msg.as_bytes()


async def _imap(port: int) -> Any:
    import aioimaplib

    client = aioimaplib.IMAP4("127.0.0.1", port, timeout=10)
    await client.wait_hello_from_server()
    await client.login(USER, PASSWORD)
    return client


def _config(
    data_dir: Path, imap_port: int, smtp_port: int, folder: str, idle: bool, poll_interval: float
) -> Any:
    from bot.config.model import AppConfig

    return AppConfig.model_validate(
        {
            "data_dir": str(data_dir),
            "owner": {"identities": {"email": [OWNER]}},
            "brain": {"provider": "offline"},
            "embedding": {"enabled": False},
            "channels": {
                "web": {"enabled": False},
                "email": {
                    "enabled": True,
                    "address": USER,
                    "password": PASSWORD,
                    "auth_serv_id": "mx.bench",
                    "imap": {
                        "host": "127.0.0.1",
                        "port": imap_port,
                        "security": "none",
                        "folder": folder,
                        "idle": idle,
                        "poll_interval": poll_interval,
                    },
                    "smtp": {
                        "host": "127.0.0.1",
                        "port": smtp_port,
                        "security": "none",
                        "auth": False,
                    },
                },
            },
        }
    )


async def _stack(config: Any) -> tuple[Any, Any]:
    from bot.services import open_services
    from channels.email.adapter import EmailChannel

    services = await open_services(config)
    channel = EmailChannel(config, services)
    services.channels["email"] = channel
    services.outbox.attach(channel)
    return services, channel


async def _throughput(
    root: Path, imap_port: int, smtp_port: int, sink: _Sink, mails: int
) -> dict[str, Any]:
    from bot.services import close_services

    client = await _imap(imap_port)
    await client.create("Throughput")
    for n in range(mails):
        await client.append(_mail("t", n), mailbox="Throughput")
    await client.logout()
    config = _config(root / "throughput", imap_port, smtp_port, "Throughput", True, 30.0)
    services, channel = await _stack(config)
    keys = {f"<bench-t-{n}@example.org>" for n in range(mails)}
    started = time.perf_counter()
    await channel.start(services.router)
    await sink.wait(keys, timeout=60 + mails)
    elapsed = max(sink.arrived[k] for k in keys) - started
    await channel.stop()
    await close_services(services)
    return {
        "mails": mails,
        "seconds": round(elapsed, 3),
        "mails_per_second": round(mails / elapsed, 2),
    }


async def _latency(
    root: Path,
    imap_port: int,
    smtp_port: int,
    sink: _Sink,
    idle: bool,
    samples: int,
    poll_interval: float,
) -> dict[str, Any]:
    from bot.services import close_services

    tag = "idle" if idle else "poll"
    folder = f"Latency{tag}"
    client = await _imap(imap_port)
    await client.create(folder)
    config = _config(
        root / tag, imap_port, smtp_port, folder, idle, 30.0 if idle else poll_interval
    )
    services, channel = await _stack(config)
    await channel.start(services.router)
    delays: list[float] = []
    try:
        for n in range(samples):
            key = f"<bench-{tag}-{n}@example.org>"
            data = _mail(tag, n)
            sent = time.perf_counter()
            await client.append(data, mailbox=folder)
            await sink.wait({key}, timeout=30 + poll_interval)
            delays.append(sink.arrived[key] - sent)
            # Start the next sample at a random phase of the polling cycle.
            await asyncio.sleep(poll_interval * ((n * 7919) % 100) / 100 if not idle else 0.05)
    finally:
        await client.logout()
        await channel.stop()
        await close_services(services)
    ms = sorted(d * 1000 for d in delays)
    return {
        "samples": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], 1),
        **({} if idle else {"poll_interval_s": poll_interval}),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both measures; returns the figures (medians, p95, mails per second)."""
    try:
        from aiosmtpd.smtp import SMTP
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError("aiosmtpd is not installed (pip install my-agent[test])") from exc
    mails = getattr(args, "mails", 50)
    samples = getattr(args, "samples", 15)
    poll = getattr(args, "poll_interval", 1.0)
    proc, imap_port = start_pymap()
    sink = _Sink()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(sink, hostname="localhost"), "127.0.0.1", 0)
    smtp_port = int(server.sockets[0].getsockname()[1])
    try:
        with tempfile.TemporaryDirectory(prefix="my-agent-bench-email-") as tmp:
            root = Path(tmp)
            throughput = await _throughput(root, imap_port, smtp_port, sink, mails)
            idle = await _latency(root, imap_port, smtp_port, sink, True, samples, poll)
            polling = await _latency(root, imap_port, smtp_port, sink, False, samples, poll)
    finally:
        server.close()
        await server.wait_closed()
        proc.terminate()
        proc.wait(5)
    return {
        "benchmark": "email",
        "servers": "pymap (IMAP, in-memory) + aiosmtpd on 127.0.0.1, offline brain",
        "throughput": throughput,
        "append_to_reply": {"idle": idle, "polling": polling},
    }
