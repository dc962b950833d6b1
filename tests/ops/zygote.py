"""Daemon children forked from one interpreter that has already imported the daemon.

A daemon start spends most of its CPU importing before it does anything a test checks:
aiogram builds the pydantic schemas of ~650 Telegram types (5-8 s of CPU on the loaded
2-core machine), the anthropic SDK ~1,500 models (3-4 s), the daemon's own modules ~1 s.
The kill -9 and reliability tests start the daemon again and again, and paid that at
every start. Here one helper process per test process (``python -m tests.ops.zygote``)
imports those modules once; each start is a ``fork()`` of it that runs the same entry
module as ``python -m`` would (``runpy``, ``__main__``), with its own environment, working
directory and log file, so the daemon's code from ``bot.cli.main`` on is exactly the
product's. What a fork does not exercise (a fresh interpreter importing the daemon, and
a string-hash seed of its own: the children of one helper share its ``PYTHONHASHSEED``)
the tests that start ``python -m bot.cli`` themselves keep covering (an ``entry`` script
in test_daemon.py, tests/test_cli.py); ``MY_AGENT_TEST_FRESH_DAEMONS=1`` makes every
daemon of the tests a fresh interpreter again.

Protocol, one JSON object a line: the client writes ``{"module", "args", "cwd", "env",
"log", "preload"}``; the helper imports ``preload`` (once each, a failure left to the child
to meet again), forks, answers ``{"pid": N}``, and when the child ends ``{"exit": N,
"code": C}`` (C as ``asyncio``'s ``returncode``: negative for a signal). At end of input it
SIGKILLs the children still running and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import importlib
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parents[2]


# -- the helper process ----------------------------------------------------------------
def _child(request: dict[str, Any], closing: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` and never return."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:  # what the interpreter does with sys.exit(X)
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()  # as at a normal interpreter exit
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _answer({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _answer(message: dict[str, Any]) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def serve() -> None:
    """The helper's loop: requests on stdin, answers and exits on stdout."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is what matters
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    children: set[int] = set()
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
                _reap(children)
                continue
            data = os.read(0, 65536)
            if not data:  # the test process is done with us
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                for name in request["preload"]:
                    try:
                        importlib.import_module(name)
                    except Exception:  # the child meets it again, and says so in its log
                        traceback.print_exc()
                pid = os.fork()
                if pid == 0:
                    _child(request, [wake_r, wake_w, selector.fileno()])
                children.add(pid)
                _answer({"pid": pid})
            _reap(children)


# -- the test process's side -----------------------------------------------------------
class ForkedProcess:
    """The part of :class:`asyncio.subprocess.Process` the daemon tests use, for a child
    of the helper (``returncode`` is known once the helper has reaped it)."""

    def __init__(self, pid: int, exited: concurrent.futures.Future[int]) -> None:
        self.pid = pid
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        if not self._exited.done():
            loop = asyncio.get_running_loop()
            done = loop.create_future()

            def wake(_: object) -> None:
                try:
                    loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))
                except RuntimeError:  # that loop is closed: nobody waits there any more
                    pass

            self._exited.add_done_callback(wake)
            await done
        return self._exited.result()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # ended, its exit not read yet
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The helper process, started on first use, one per test process."""

    def __init__(self, env: dict[str, str]) -> None:
        self._errors: BinaryIO = tempfile.TemporaryFile()  # why the helper ended, if it does
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ops.zygote"],
            cwd=str(REPO), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._errors,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._pids: collections.deque[concurrent.futures.Future[int]] = collections.deque()
        self._exits: dict[int, concurrent.futures.Future[int]] = {}
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "pid" in message:
                    self._exits.setdefault(message["pid"], concurrent.futures.Future())
                    self._pids.popleft().set_result(message["pid"])
                else:
                    exited = self._exits.setdefault(message["exit"], concurrent.futures.Future())
                    exited.set_result(message["code"])
        with self._lock:  # the helper ended: nothing more will come
            self._errors.seek(0)
            failure = RuntimeError(f"the zygote ended: {self._errors.read()[-4000:]!r}")
            for waiting in (*self._pids, *self._exits.values()):
                if not waiting.done():
                    waiting.set_exception(failure)

    def alive(self) -> bool:
        return self._proc.poll() is None

    async def spawn(
        self, module: str, args: list[str], *, cwd: Path, env: dict[str, str], log: Path,
        preload: list[str],
    ) -> ForkedProcess:  # fmt: skip
        request = {"module": module, "args": args, "cwd": str(cwd), "env": env}
        request |= {"log": str(log), "preload": preload}
        answer: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            assert self._proc.stdin is not None
            self._pids.append(answer)
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
        # the first start of a kind imports in the helper (seconds): not on the loop
        pid = await asyncio.wrap_future(answer)
        with self._lock:
            return ForkedProcess(pid, self._exits[pid])

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._errors.close()


_zygote: Zygote | None = None


def zygote(env: dict[str, str]) -> Zygote:
    """This test process's helper (started with ``env`` the first time)."""
    global _zygote
    if _zygote is None or not _zygote.alive():
        _zygote = Zygote(env)
        atexit.register(_zygote.close)
    return _zygote


def daemon_imports(config: dict[str, Any], env: dict[str, str]) -> list[str]:
    """What a daemon on ``config`` (a YAML-able dict) and ``env`` imports at its start,
    for the helper to import once: its channels, its brain, the composition root. Not
    bot.cli itself: the child runs it as __main__, as ``python -m`` does (a copy imported
    beforehand made runpy warn)."""
    names = ["bot.cli_common", "bot.daemon", "bot.services"]
    brain = config.get("brain") or {}
    keyed = brain.get("api_key") or env.get("ANTHROPIC_API_KEY")
    if brain.get("provider") == "anthropic" or (keyed and brain.get("provider") is None):
        names.append("bot.brain.anthropic")
    channels = config.get("channels") or {}
    for name in ("web", "telegram", "email", "loopback"):
        default = name == "web"  # the dashboard is on unless turned off
        if (channels.get(name) or {}).get("enabled", default):
            names.append(f"channels.{name}")
    if "channels.telegram" in names:
        names.append("channels.telegram.adapter")  # the package imports aiogram lazily
    return names


def wanted() -> bool:
    """Whether daemon children come from the helper (``MY_AGENT_TEST_FRESH_DAEMONS=1``: no)."""
    return os.environ.get("MY_AGENT_TEST_FRESH_DAEMONS", "") in ("", "0")


if __name__ == "__main__":
    serve()
