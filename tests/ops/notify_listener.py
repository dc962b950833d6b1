"""A real ``NOTIFY_SOCKET`` for tests: a unix datagram socket that records sd_notify messages."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable


class NotifyListener:
    """Bind a datagram socket (path or abstract) and collect the messages sent to it.

    Each message is parsed into a dict of its ``KEY=value`` lines; ``messages`` keeps them
    in arrival order.
    """

    def __init__(self, abstract: bool = False) -> None:
        self._dir = tempfile.mkdtemp(prefix="sdn-")  # short: sun_path is 108 bytes
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"my-agent-test-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.env_value = "@" + name
        else:
            path = os.path.join(self._dir, "notify.sock")
            self.sock.bind(path)
            self.env_value = path
        self.sock.setblocking(False)
        self.messages: list[dict[str, str]] = []

    def drain(self) -> list[dict[str, str]]:
        """Read every datagram queued right now (never waits)."""
        new: list[dict[str, str]] = []
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                break
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            new.append(fields)
        self.messages.extend(new)
        return new

    def keys(self) -> list[str]:
        """The first key of every message so far (READY, STATUS, WATCHDOG, STOPPING...)."""
        out = []
        for msg in self.messages:
            for key in ("READY", "STOPPING", "RELOADING", "WATCHDOG"):
                if key in msg:
                    out.append(key)
                    break
            else:
                out.append(next(iter(msg), ""))
        return out

    async def wait_for(
        self,
        predicate: Callable[[dict[str, str]], bool],
        timeout: float = 10.0,
        *,
        since: int = 0,
    ) -> dict[str, str]:
        """Wait (polling, on the loop) until a message matching ``predicate`` arrives;
        ``since`` skips the first messages already seen."""
        seen = since
        deadline = time.monotonic() + timeout
        while True:
            found, seen = self._look(predicate, seen, deadline)
            if found is not None:
                return found
            await asyncio.sleep(0.02)

    def wait_for_sync(
        self, predicate: Callable[[dict[str, str]], bool], timeout: float = 10.0
    ) -> dict[str, str]:
        """Blocking variant of :meth:`wait_for` for tests that own no event loop."""
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            found, seen = self._look(predicate, seen, deadline)
            if found is not None:
                return found
            time.sleep(0.02)

    def _look(
        self, predicate: Callable[[dict[str, str]], bool], seen: int, deadline: float
    ) -> tuple[dict[str, str] | None, int]:
        """One look at what came: the first message after the ``seen`` first that
        matches (else None) and how many are seen now; TimeoutError past ``deadline``."""
        self.drain()
        for msg in self.messages[seen:]:
            if predicate(msg):
                return msg, seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"no matching notify message; got {self.messages!r}")
        return None, len(self.messages)

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)
