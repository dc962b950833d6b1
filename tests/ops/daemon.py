"""Run the real daemon (``python -m bot.cli run``) as a child process for ops tests.

The child gets a real ``NOTIFY_SOCKET`` (and optionally ``WATCHDOG_USEC``): READY=1 is
how we know its channels are up. Its output goes to ``daemon-N.log`` beside the data
directory so a failing test can show it. It is forked from a helper that has imported the
daemon already (:mod:`tests.ops.zygote`: seconds of CPU saved at every start), unless
``fresh=True`` or ``MY_AGENT_TEST_FRESH_DAEMONS=1``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.ops import zygote
from tests.ops.notify_listener import NotifyListener

REPO = Path(__file__).resolve().parents[2]


class DaemonProcess:
    """One daemon child process on ``root/data`` with ``config`` (a YAML-able dict)."""

    def __init__(
        self,
        root: Path,
        config: dict[str, Any],
        *,
        env: dict[str, str] | None = None,
        watchdog_usec: int | None = None,
        crash_at: str | None = None,
        fresh: bool = False,
        answering_known: bool = False,
    ) -> None:
        self.root = root
        # tests/ops/crashpoint.py: SIGKILL at that point of the code (for the next start)
        self.crash_at = crash_at
        # tests/ops/answering_daemon.py: known contacts answered offline (a stand-in for
        # a model's answers to them)
        self.answering_known = answering_known
        assert not (crash_at and answering_known), "one entry module or the other"
        self.config = config
        self.extra_env = env or {}
        self.watchdog_usec = watchdog_usec
        # a fresh interpreter (``python -m``) rather than a fork of tests.ops.zygote
        self.fresh = fresh or not zygote.wanted()
        self.proc: asyncio.subprocess.Process | zygote.ForkedProcess | None = None
        self.notify: NotifyListener | None = None
        self.runs = 0
        self.config_path = root / "config.yaml"
        self.log_path = root / "daemon-0.log"

    @property
    def data_dir(self) -> Path:
        return Path(self.config["data_dir"])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def write_config(self) -> Path:
        self.config_path.write_text(yaml.safe_dump(self.config), encoding="utf-8")
        return self.config_path

    def _env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ANTHROPIC_API_KEY", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
        }
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        if self.notify is not None:
            env["NOTIFY_SOCKET"] = self.notify.env_value
        if self.watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(self.watchdog_usec)
        env.update(self.extra_env)
        return env

    async def start(self, *, wait_ready: bool = True, timeout: float = 60.0) -> None:
        """Start the child; with ``wait_ready`` return once it has sent READY=1."""
        assert self.proc is None or self.proc.returncode is not None, "already running"
        self.write_config()
        if self.notify is not None:
            self.notify.close()
        self.notify = NotifyListener()
        self.log_path = self.root / f"daemon-{self.runs}.log"
        self.runs += 1
        module, *args = [*self._module(), "run", "--config", str(self.config_path)]
        if self.fresh:
            log = self.log_path.open("wb")
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", module, *args,
                    cwd=str(self.root), env=self._env(), stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
            finally:
                log.close()
        else:
            self.proc = await zygote.zygote(self._zygote_env()).spawn(
                module, args, cwd=self.root, env=self._env(), log=self.log_path,
                preload=zygote.daemon_imports(self.config, self._env()),
            )  # fmt: skip
        if wait_ready:
            await self.wait_ready(timeout)

    def _zygote_env(self) -> dict[str, str]:
        """The helper's own environment: the test process's, without this daemon's."""
        env = {k: v for k, v in self._env().items() if k not in self.extra_env}
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC"):
            env.pop(name, None)
        return env

    def _module(self) -> list[str]:
        if self.crash_at:
            return ["tests.ops.crashpoint", self.crash_at]
        if self.answering_known:
            return ["tests.ops.answering_daemon"]
        return ["bot.cli"]

    async def wait_ready(self, timeout: float = 60.0) -> dict[str, str]:
        assert self.notify is not None and self.proc is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            self.notify.drain()
            for msg in self.notify.messages:
                if msg.get("READY") == "1":
                    return msg
            if self.proc.returncode is not None:
                raise RuntimeError(
                    f"daemon exited with {self.proc.returncode} before READY:\n{self.log()}"
                )
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"no READY=1 within {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)

    async def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise

    async def kill9(self) -> None:
        """SIGKILL: no drain, no cleanup, like a power cut for the process."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()

    def rss_kib(self) -> int:
        """Resident set size of the child (VmRSS, KiB)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def log(self, tail: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await self.kill9()
        if self.notify is not None:
            self.notify.close()
            self.notify = None
