"""The daemon side of ``my-agent bench web`` (:mod:`bot.bench.web`), run in a child
process so that the measuring clients never share its event loop: the real core, the
offline brain and the web channel, until the parent says stop.
"""

from __future__ import annotations

import asyncio
import resource
from multiprocessing.connection import Connection
from pathlib import Path


def raise_fd_limit() -> int:
    """Raise this process's open-file limit as far as allowed (a client per tab); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    target = min(target, 65536)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def serve(data_dir: str, conn: Connection) -> None:
    """Child process: the daemon's core and web channel until the parent says stop."""
    raise_fd_limit()
    asyncio.run(_serve_async(Path(data_dir), conn))


async def _serve_async(data_dir: Path, conn: Connection) -> None:
    import logging

    from bot.config.model import AppConfig
    from bot.services import close_services, open_services
    from channels.web import WebChannel

    logging.basicConfig(level=logging.ERROR)
    config = AppConfig.model_validate(
        {
            "data_dir": str(data_dir),
            "brain": {"provider": "offline"},
            "embedding": {"enabled": False},
            "channels": {"web": {"port": 0}},
            "logging": {"level": "ERROR"},
        }
    )
    services = await open_services(config)
    channel = WebChannel(config, services)
    services.channels["web"] = channel
    services.stream_sink = channel.stream
    services.outbox.attach(channel)
    await channel.start(services.router)
    services.ready = True
    conn.send((channel.url, channel.token))
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    await channel.stop()
    await close_services(services)
