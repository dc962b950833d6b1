"""The real daemon as a child process (``python -m bot.cli run``): SIGTERM in the middle
of a reply loses nothing, and every reply is produced exactly once across the restart.

The brain is the Anthropic brain talking over HTTP to the fake Messages API
(``bot/bench/fakes/anthropic_api.py``) running in the test process, scripted to answer
slowly so that a reply is in flight when the signal arrives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted, last_user_text
from tests.conftest import clear_config_env, raw_config
from tests.support import Daemon, transcript_lines, turns

pytestmark = pytest.mark.slow  # the real daemon, started two or three times a test


class SlowModel:
    """Answers ``answer to <text>``, sleeping ``delays[text]`` seconds first."""

    def __init__(self, fake: FakeAnthropicAPI) -> None:
        self.fake = fake
        self.delays: dict[str, float] = {}
        self.asked: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Scripted:
        # The message being answered is the last paragraph of the last user message
        # (messages that arrived while a reply was pending are joined before it).
        text = last_user_text(body).strip().split("\n\n")[-1]
        self.asked.append(text)
        self.fake.push(self)  # keep answering every request this way
        return Scripted([Block("text", text=f"answer to {text}")], delay=self.delays.get(text, 0))

    async def wait_asked(self, text: str, timeout: float = 15.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while text not in self.asked:
            if loop.time() > deadline:
                raise TimeoutError(f"the model was never asked {text!r}: {self.asked}")
            await asyncio.sleep(0.02)


@pytest.fixture
async def model() -> AsyncIterator[SlowModel]:
    async with FakeAnthropicAPI() as fake:
        slow = SlowModel(fake)
        fake.push(slow)
        yield slow
        # A request still sleeping in the fake (its client is gone) would hold the
        # server's shutdown for the rest of its delay.
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task() and "RequestHandler" in repr(task.get_coro()):
                task.cancel()


def daemon_config(tmp_path: Path, base_url: str) -> dict[str, Any]:
    return {
        "data_dir": str(tmp_path / "data"),
        "owner": {"identities": {"loopback": ["owner"]}},
        "brain": {
            "provider": "anthropic",
            "base_url": base_url,
            "api_key": "test-key",
            "request_timeout": 30,
            "retry_budget_seconds": 5,
        },
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }


@pytest.fixture
async def daemon(tmp_path: Path, model: SlowModel) -> AsyncIterator[Daemon]:
    proc = Daemon(tmp_path, daemon_config(tmp_path, model.fake.base_url))
    try:
        yield proc
    finally:
        await proc.close()


def _owner_transcript(daemon: Daemon) -> list[dict[str, Any]]:
    found = transcript_lines(daemon.data_dir / "conversations")
    assert len(found) == 1, found.keys()
    return next(iter(found.values()))


def _replies_sent(daemon: Daemon) -> list[str]:
    return [s["text"] for s in daemon.sent() if s["kind"] == "reply"]


async def _wait_replies(daemon: Daemon, count: int, timeout: float = 15.0) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(_replies_sent(daemon)) < count:
        if loop.time() > deadline:
            raise TimeoutError(f"{_replies_sent(daemon)} after {timeout}s:\n{daemon.log()}")
        await asyncio.sleep(0.05)
    return _replies_sent(daemon)


MESSAGES = ["first question", "second question", "third question"]


@pytest.mark.parametrize("reply_seconds", [2.5, 30.0], ids=["finishes-in-drain", "cut-off"])
async def test_sigterm_mid_reply_loses_nothing(
    daemon: Daemon, model: SlowModel, reply_seconds: float
) -> None:
    model.delays["first question"] = reply_seconds
    if reply_seconds > 5:
        # Replies get half the drain: 2 s is as much a cut-off for a 30 s reply as the
        # default 10 s, without the test waiting out the other 8.
        daemon.config["service"] = {"drain_seconds": 4}
    await daemon.start()
    for i, text in enumerate(MESSAGES):
        assert await daemon.post("owner", text, f"msg-{i}") == 200
    await model.wait_asked("first question")  # the first reply is now in flight
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    await daemon.wait_log("stopping")
    # While draining, the ingress refuses new messages (503: not stored, send again).
    assert await daemon.post("owner", "too late", "msg-late") == 503
    assert await daemon.signal(signal.SIGTERM) == 0, daemon.log()
    assert "Traceback" not in daemon.log()

    lines = _owner_transcript(daemon)
    assert [t["content"] for t in turns(lines, "user")] == MESSAGES  # acknowledged = durable
    assert [t["turnNumber"] for t in turns(lines, "user")] == [1, 2, 3]
    replies_before = _replies_sent(daemon)
    if reply_seconds < 5:
        # The drain let the reply in flight finish; the queued ones wait for the restart.
        assert replies_before == ["answer to first question"]
        assert [t["turnNumber"] for t in turns(lines, "assistant")] == [1]
    else:
        # Cut off by the drain deadline: no half reply recorded or sent.
        assert replies_before == []
        assert turns(lines, "assistant") == []

    model.delays.clear()
    await daemon.start()
    await _wait_replies(daemon, 3)
    await asyncio.sleep(0.3)  # anything extra would show up now
    assert await daemon.signal(signal.SIGTERM) == 0, daemon.log()
    expected = [f"answer to {t}" for t in MESSAGES]
    assert _replies_sent(daemon) == expected
    assistant = turns(_owner_transcript(daemon), "assistant")
    assert [(t["turnNumber"], t["content"]) for t in assistant] == list(
        zip([1, 2, 3], expected, strict=True)
    )
    assert model.asked.count("first question") == (1 if reply_seconds < 5 else 2)
    assert model.asked.count("third question") == 1
    assert "too late" not in model.asked

    if reply_seconds > 5:
        # A third start finds nothing left to do and sends nothing again.
        await daemon.start()
        await asyncio.sleep(0.3)
        assert await daemon.signal(signal.SIGTERM) == 0
        assert _replies_sent(daemon) == expected
        assert model.asked.count("third question") == 1


async def test_a_second_ctrl_c_stops_at_once_and_loses_nothing(
    tmp_path: Path, model: SlowModel
) -> None:
    # Regression: a second Ctrl-C while stopping did nothing: with a reply in flight the
    # owner waited out the whole drain at the terminal (here 60 s: 30 for the replies).
    config = daemon_config(tmp_path, model.fake.base_url)
    config["service"] = {"drain_seconds": 60}
    daemon = Daemon(tmp_path, config)
    try:
        model.delays["first question"] = 120.0
        await daemon.start()
        assert await daemon.post("owner", "first question", "msg-0") == 200
        await model.wait_asked("first question")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGINT)
        await daemon.wait_log("stopping")
        started = time.monotonic()
        assert await daemon.signal(signal.SIGINT) == 0, daemon.log()
        assert time.monotonic() - started < 20, daemon.log()  # not the drain's 30 s
        assert "interrupted again: stopping now" in daemon.log()
        assert "Traceback" not in daemon.log()
        assert turns(_owner_transcript(daemon), "assistant") == []  # no half reply
        model.delays.clear()
        await daemon.start()  # the cut-short reply is answered after the restart
        assert await _wait_replies(daemon, 1) == ["answer to first question"]
        assert await daemon.signal(signal.SIGTERM) == 0, daemon.log()
    finally:
        await daemon.close()


async def test_sigint_and_deleted_index(daemon: Daemon, model: SlowModel) -> None:
    """SIGINT stops cleanly too; a deleted conversations.db is rebuilt on the next start."""
    await daemon.start()
    assert await daemon.post("owner", "remember the blue kayak", "k-1") == 200
    await _wait_replies(daemon, 1)
    assert await daemon.signal(signal.SIGINT) == 0
    index = daemon.data_dir / "conversations" / "conversations.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    await daemon.start()
    assert "'registered': 1" in daemon.log()
    assert await daemon.post("owner", "and the red canoe", "k-2") == 200
    await _wait_replies(daemon, 2)
    assert await daemon.signal(signal.SIGTERM) == 0
    lines = _owner_transcript(daemon)
    assert [t["turnNumber"] for t in turns(lines)] == [1, 1, 2, 2]


async def test_bad_config_exits_78(tmp_path: Path) -> None:
    proc = Daemon(tmp_path, {"data_dir": str(tmp_path / "data"), "owner": {"timezone": "Nope"}})
    with pytest.raises(RuntimeError, match="daemon exited 78"):
        await proc.start()
    assert "owner.timezone" in proc.log()


async def test_a_port_in_use_exits_69_with_one_line(tmp_path: Path) -> None:
    # Regression: the web channel's bind error came out as a raw traceback, exit 1.
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        config = {
            "data_dir": str(tmp_path / "data"),
            "embedding": {"enabled": False},
            "channels": {"web": {"enabled": True, "host": "127.0.0.1", "port": port}},
        }
        proc = Daemon(tmp_path, config)
        with pytest.raises(RuntimeError, match="daemon exited 69"):
            await proc.start()
        assert "channel web cannot start" in proc.log()
        # Regression: "address already in use" did not say which setting moves it.
        assert "channels.web.port: another program" in proc.log()
        assert "Traceback" not in proc.log()
    finally:
        taken.close()


async def test_a_corrupt_state_db_is_named_with_what_to_do(tmp_path: Path) -> None:
    # Regression: "cannot open the databases: file is not a database", then "Event loop
    # is closed" tracebacks from the connection's thread.
    data = tmp_path / "data"
    (data / "conversations").mkdir(parents=True)
    (data / "state.db").write_bytes(os.urandom(8192))
    proc = Daemon(tmp_path, {"data_dir": str(data), "embedding": {"enabled": False}})
    with pytest.raises(RuntimeError, match="daemon exited 74"):
        await proc.start()
    log = proc.log()
    assert f"cannot open {data / 'state.db'}" in log and "Traceback" not in log
    assert "outbox" in log and "reindex" not in log


async def test_a_corrupt_index_is_set_aside_and_the_daemon_starts(tmp_path: Path) -> None:
    # Before session 18 it exited 74 like a corrupt state.db (tests/test_index_rescue.py)
    data = tmp_path / "data"
    (data / "conversations").mkdir(parents=True)
    (data / "conversations" / "conversations.db").write_bytes(os.urandom(8192))
    config = {
        "data_dir": str(data),
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }
    proc = Daemon(tmp_path, config)
    try:
        await proc.start()
        assert "conversations.db is corrupt" in proc.log() and "Traceback" not in proc.log()
        assert list((data / "conversations").glob("conversations.db.corrupt-*"))
        assert await proc.signal() == 0
    finally:
        await proc.close()


STUCK_MODEL = """
import sys, time

import bot.embedding

def stuck(factory, kwargs):
    # what fastembed does offline: retries with sleeps of 3, 9 and 27 s
    print("model load stuck", flush=True)
    time.sleep(600)

bot.embedding.hub_unreachable = lambda: None  # as if online: the load gets as far as fastembed
bot.embedding._without_spinning = stuck
from bot.cli import main
sys.exit(main())
"""


async def test_sigterm_while_the_model_is_loading(tmp_path: Path) -> None:
    """A stop does not wait for the embedding model's load: a download in fastembed's
    retry sleeps (3 + 9 + 27 s offline) is on a worker thread the interpreter would join
    at exit; `run` ends with ``os._exit`` once everything is closed (bot.cli)."""
    entry = tmp_path / "stuck_model.py"
    entry.write_text(STUCK_MODEL, encoding="utf-8")
    config = {
        "data_dir": str(tmp_path / "data"),
        "owner": {"identities": {"loopback": ["owner"]}},
        "brain": {"provider": "offline"},
        "embedding": {"enabled": True},  # no model_path: the (stuck) cache or hub
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }
    daemon = Daemon(tmp_path, config, entry=entry)
    try:
        await daemon.start()
        await daemon.wait_log("model load stuck")
        assert await daemon.signal(signal.SIGTERM, timeout=20) == 0, daemon.log()
    finally:
        await daemon.close()


# The same, with the channels started only once the load is stuck (as when the web
# channel takes its time): the start then fails with a loading thread left behind.
STUCK_MODEL_BEFORE_CHANNELS = STUCK_MODEL.replace(
    "bot.embedding._without_spinning = stuck",
    """import asyncio, threading
import bot.daemon

loading = threading.Event()
def stuck_and_said(factory, kwargs):
    loading.set()
    stuck(factory, kwargs)

original_start_channels = bot.daemon.start_channels
async def start_channels(*args):
    await asyncio.to_thread(loading.wait, 10)
    await original_start_channels(*args)

bot.embedding._without_spinning = stuck_and_said
bot.daemon.start_channels = start_channels""",
)


async def test_a_failed_start_does_not_wait_for_the_model_load(tmp_path: Path) -> None:
    # Regression: exit 69 (a port in use) came only once the embedding model's load gave
    # up (40 s of fastembed's retries offline): the error paths of `run` returned through
    # the interpreter's exit, which joins the loading thread; only a stop used os._exit.
    import socket

    entry = tmp_path / "stuck_model.py"
    entry.write_text(STUCK_MODEL_BEFORE_CHANNELS, encoding="utf-8")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        config = {
            "data_dir": str(tmp_path / "data"),
            "brain": {"provider": "offline"},
            "embedding": {"enabled": True},  # no model_path: the (stuck) cache or hub
            "channels": {
                "web": {"enabled": True, "host": "127.0.0.1", "port": taken.getsockname()[1]}
            },
        }
        proc = Daemon(tmp_path, config, entry=entry)
        with pytest.raises(RuntimeError, match="daemon exited 69"):
            await proc.start(timeout=90)
        log = proc.log()
        assert "model load stuck" in log and "channel web cannot start" in log
    finally:
        taken.close()
        await proc.close()


async def test_sighup_without_a_config_file_says_there_is_nothing_to_reload(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: on the embedded default a SIGHUP re-read nothing but logged
    # "configuration reloaded".
    from types import SimpleNamespace

    from bot.daemon import reload

    statuses: list[str | None] = []
    notifier = SimpleNamespace(reloading=lambda: None, ready=statuses.append)
    identities = object()
    services = SimpleNamespace(config_path=None, identities=identities)
    with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
        await reload(services, notifier)  # type: ignore[arg-type]
    assert services.identities is identities
    assert statuses == ["ready: nothing to reload (no configuration file)"]
    assert "configuration reloaded" not in caplog.text


async def test_a_stop_asks_systemd_for_the_configured_drain_time(tmp_path: Path) -> None:
    # Regression: the unit's TimeoutStopSec (45 s) fits the default drain (20 s); with
    # service.drain_seconds 120 systemd sent SIGKILL in the middle of the drain.
    from bot.daemon import shutdown
    from bot.notify import Notifier
    from bot.services import open_services
    from tests.conftest import make_config
    from tests.ops.notify_listener import NotifyListener

    listener = NotifyListener()
    try:
        services = await open_services(make_config(tmp_path, service={"drain_seconds": 120}))
        notifier = Notifier(env={"NOTIFY_SOCKET": listener.env_value})
        await asyncio.wait_for(shutdown(services, [], notifier), 10)
        messages = listener.drain()
    finally:
        listener.close()
    stopping = next(i for i, m in enumerate(messages) if m.get("STOPPING") == "1")
    extend = [
        int(m["EXTEND_TIMEOUT_USEC"]) for m in messages[stopping:] if "EXTEND_TIMEOUT_USEC" in m
    ]
    assert len(extend) == 1 and extend[0] > 120 * 1_000_000  # the drain and the rest


SLOW_RECOVERY = """
import sys, time
from pathlib import Path

import asyncio.unix_events

import bot.services

real_recover = bot.services.recover
signalled = Path(__file__).with_name("signalled")
loop_class = asyncio.unix_events._UnixSelectorEventLoop
real_add_signal_handler = loop_class.add_signal_handler

def add_signal_handler(self, sig, callback, *args):
    def handled(*a):
        callback(*a)
        signalled.touch()  # the daemon's own handler has run: the stop is asked for

    return real_add_signal_handler(self, sig, handled, *args)

loop_class.add_signal_handler = add_signal_handler

def slow_recover(*args, **kwargs):
    # a large store: the catch-up lasts until the daemon's signal handler has run (it
    # was a fixed 3 s, most of it waited for nothing once the signal was handled)
    print("recovery running", flush=True)
    deadline = time.monotonic() + 60
    while not signalled.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return real_recover(*args, **kwargs)

bot.services.recover = slow_recover
from bot.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_while_the_store_opens_exits_0_without_starting(
    tmp_path: Path, sig: int
) -> None:
    # Regression: the signal handlers were installed only once the store was open, so
    # a SIGTERM during a long recovery killed the process by the signal (status 143).
    entry = tmp_path / "slow_recovery.py"
    entry.write_text(SLOW_RECOVERY, encoding="utf-8")
    config = {
        "data_dir": str(tmp_path / "data"),
        "owner": {"identities": {"loopback": ["owner"]}},
        "brain": {"provider": "offline"},
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }
    daemon = Daemon(tmp_path, config, entry=entry)
    daemon.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with daemon.log_path.open("wb") as log:
        daemon.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(entry), "run", "--config", str(daemon.config_path),
            cwd=str(tmp_path), env=daemon.env(), stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        await daemon.wait_log("recovery running")
        assert await daemon.signal(sig, timeout=20) == 0, daemon.log()
        assert (tmp_path / "signalled").exists()  # the recovery ended by the signal
        assert "channel loopback started" not in daemon.log()
        assert "Traceback" not in daemon.log()
    finally:
        await daemon.close()


async def test_a_sighup_while_the_daemon_starts_does_not_kill_it(tmp_path: Path) -> None:
    # Regression: the SIGHUP handler was installed once the store had opened. A reload
    # (`systemctl reload`, logrotate's `kill -HUP`) while the daemon waited for a reindex
    # or the disk, or replayed its journal, killed it by the signal (status -1/129).
    from bot import store_lock
    from tests.ops.daemon import DaemonProcess

    config = {
        "data_dir": str(tmp_path / "data"),
        "owner": {"identities": {"loopback": ["owner"]}},
        "brain": {"provider": "offline"},
        "embedding": {"enabled": False},
        "channels": {"web": {"enabled": False}, "loopback": {"enabled": True, "port": 0}},
    }
    (tmp_path / "data").mkdir()
    reindex = store_lock.try_lock(tmp_path / "data", exclusive=True)  # as a reindex
    proc = DaemonProcess(tmp_path, config)
    try:
        await proc.start(wait_ready=False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while "a reindex is running" not in proc.log():
            assert proc.proc is not None and proc.proc.returncode is None, proc.log()
            assert loop.time() < deadline, proc.log()
            await asyncio.sleep(0.05)
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGHUP)
        # (a SIGHUP that killed it fails wait_ready below: no fixed wait needed here)
        store_lock.release(reindex)
        reindex = None
        await proc.wait_ready(30)
        # the reload asked for is done once ready (logged a moment after READY=1)
        deadline = loop.time() + 30
        while "configuration reloaded" not in proc.log():
            assert loop.time() < deadline, proc.log()
            await asyncio.sleep(0.05)
        assert await proc.terminate() == 0
    finally:
        store_lock.release(reindex)
        await proc.close()


@pytest.mark.parametrize(
    ("error", "key"),
    [
        (OSError(13, "error while attempting to bind on address ('127.0.0.1', 80)"), "port"),
        (OSError(99, "error while attempting to bind on address ('192.0.2.1', 4321)"), "host"),
        (socket.gaierror(-2, "Name or service not known"), "host"),
    ],
)
async def test_a_channel_that_cannot_listen_is_named_with_its_key(error: OSError, key: str) -> None:
    # Regression: a bind error said what the socket said, not which setting to change.
    from types import SimpleNamespace

    from bot.daemon import start_channels
    from bot.services import ChannelStartError

    async def start(router: object) -> None:
        raise error

    channel = SimpleNamespace(name="web", start=start)
    services = SimpleNamespace(router=object())
    with pytest.raises(ChannelStartError, match=rf"channels\.web\.{key}: "):
        await start_channels(services, [channel])  # type: ignore[arg-type, list-item]


async def test_the_ready_line_sets_apart_a_channel_still_connecting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: with Telegram refusing the bot token (or not reachable yet), the log's
    # "my-agent ready: ..., channels web, telegram" and the status line said the channel
    # was up while it retried in the background and no message of the owner's came in.
    # (In this process: a daemon child paid aiogram's import, ~8 s of CPU, for a line.)
    from bot.config import AppConfig
    from bot.daemon import run_daemon
    from bot.notify import read_status_file

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    config = AppConfig.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "brain": {"provider": "offline"},
            "embedding": {"enabled": False},
            "owner": {"identities": {"telegram": ["1001"]}},
            "channels": {
                "web": {"enabled": False},
                "loopback": {"enabled": True, "port": 0},
                "telegram": {
                    "enabled": True,
                    "token": "123456:TEST-token_abc",
                    "api_base": f"http://127.0.0.1:{dead_port}",
                    "send_retries": 0,
                },
            },
        }
    )
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="my_agent"):
        daemon = asyncio.create_task(run_daemon(config, stop))
        try:
            deadline = time.monotonic() + 60
            status: dict[str, Any] = {}
            while status.get("state") != "ready":
                assert not daemon.done(), caplog.text
                assert time.monotonic() < deadline, caplog.text
                await asyncio.sleep(0.05)
                status = read_status_file(config.data_dir / "daemon.json") or {}
        finally:
            stop.set()
            assert await asyncio.wait_for(daemon, 30) == 0
    said = [r.getMessage() for r in caplog.records]
    ready = next(line for line in said if "my-agent ready" in line)
    assert "channels loopback (not connected yet, retrying: telegram)" in ready, ready
    assert "channel telegram started" not in said
    assert "channel telegram not connected yet: retrying in the background" in said, said
    assert "retrying: telegram" in status["status"], status


@pytest.mark.parametrize("enabled", [False, True])
async def test_keyword_only_search_is_told_with_its_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, enabled: bool, monkeypatch: Any
) -> None:
    # Regression: "vector search unavailable (no embedding model or no sqlite-vec)" was a
    # WARNING with embedding.enabled false (the owner's choice), and with a model that
    # could not be loaded it named neither why nor the key that gives it one.
    from bot.config.model import AppConfig

    # the variable names a model that loads (CI sets it for the suite): it would win
    # over the missing model_path below
    monkeypatch.delenv("MY_AGENT_EMBEDDING_MODEL_PATH", raising=False)
    from bot.daemon import attach_background
    from bot.daemon_stop import shutdown
    from bot.services import open_services

    missing = tmp_path / "no-model-here"
    config = AppConfig.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "brain": {"provider": "offline"},
            "embedding": {"enabled": enabled, "model_path": str(missing)},
            "channels": {"web": {"enabled": False}},
        }
    )
    services = await open_services(config)
    try:
        with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
            await attach_background(services)
            for _ in range(200):
                said = [r for r in caplog.records if "vector search unavailable" in r.message]
                if said:
                    break
                await asyncio.sleep(0.05)
    finally:
        await shutdown(services, [], None, drain_seconds=1)
    assert len(said) == 1, caplog.text
    if enabled:
        # one warning, the embedding's, naming the model and the key; the daemon's
        # line follows at INFO (two warnings in a row read as two problems)
        assert said[0].levelno == logging.INFO and "did not load" in said[0].message
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1, caplog.text
        assert str(missing) in warned[0].message and "model_path" in warned[0].message
    else:
        assert said[0].levelno == logging.INFO
        assert "embedding.enabled is false" in said[0].message


async def test_sighup_says_what_it_does_not_take(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a new embedding model (or idle timeout) edited and SIGHUPed logged
    # "configuration reloaded", while search went on with the old model until a restart.
    from types import SimpleNamespace

    from bot.config import load_config
    from bot.daemon import reload

    raw = raw_config(tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    statuses: list[str | None] = []
    notifier = SimpleNamespace(reloading=lambda: None, ready=statuses.append)
    services = SimpleNamespace(config_path=path, config=load_config(path), channels={})
    raw["trust"] = {"default_tier": "blocked"}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    await reload(services, notifier)  # type: ignore[arg-type]
    assert statuses[-1] == "ready: configuration reloaded"
    raw["embedding"] = {"enabled": True, "model_name": "BAAI/bge-small-en-v1.5"}
    raw["conversations"] = {"idle_timeout_seconds": 60}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
        await reload(services, notifier)  # type: ignore[arg-type]
    assert statuses[-1] == "ready: configuration reloaded; restart to take embedding, conversations"
    assert "embedding.*, conversations.* changed in the configuration" in caplog.text
    assert "restart the daemon" in caplog.text
    # Regression: only embedding, conversations and search were compared: a new
    # brain.base_url (or a channel's settings) SIGHUPed said "configuration reloaded",
    # and the replies went on failing against the old endpoint.
    raw["brain"] = {**raw["brain"], "base_url": "http://127.0.0.1:9"}
    raw["channels"] = {**raw["channels"], "loopback": {"enabled": True}}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="my_agent.daemon"):
        await reload(services, notifier)  # type: ignore[arg-type]
    assert statuses[-1] == (
        "ready: configuration reloaded; restart to take brain, channels, embedding, conversations"
    )
    assert "brain.*, channels.*, embedding.*, conversations.* changed" in caplog.text


async def test_sighup_masks_a_secret_new_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (session 40) The log masks the configured secrets (bot/redaction.py): a token or
    # password written into the file since the start is masked once reloaded, the
    # running one still is (the channels keep it until a restart).
    from types import SimpleNamespace

    from bot import redaction
    from bot.config import load_config
    from bot.daemon import reload

    clear_config_env(monkeypatch)
    raw = raw_config(tmp_path)
    raw["channels"] = {**raw["channels"], "email": {"password": "old-secret-1"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    services = SimpleNamespace(config_path=path, config=load_config(path), channels={})
    redaction.use_config(services.config)
    raw["channels"]["email"] = {"password": "new-secret-2"}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    notifier = SimpleNamespace(reloading=lambda: None, ready=lambda status: None)
    await reload(services, notifier)  # type: ignore[arg-type]
    assert redaction.mask("old-secret-1 new-secret-2") == "*** ***"


async def test_a_refused_start_is_recorded_as_refused_not_as_a_crash(tmp_path: Path) -> None:
    """Regression (session 42): a start refused with exit 74 (an index from a newer
    my-agent) left daemon.json saying "starting", and `my-agent status` said the daemon
    "ended without stopping (killed or crashed)"."""
    from bot import healthcheck
    from bot.config import load_config
    from tests.sqlite_driver import sqlite3

    data = tmp_path / "data"
    (data / "conversations").mkdir(parents=True)
    conn = sqlite3.connect(data / "conversations" / "conversations.db")
    conn.execute("PRAGMA user_version=999")
    conn.close()
    proc = Daemon(tmp_path, {"data_dir": str(data), "embedding": {"enabled": False}})
    with pytest.raises(RuntimeError, match="daemon exited 74"):
        await proc.start()
    daemon = healthcheck.daemon_from_status_file(data)
    assert daemon["state"] == "stopped" and "unclean" not in daemon, daemon
    assert daemon["exit_code"] == 74 and daemon["refused"] is True
    assert "schema version 999" in daemon["exit_reason"]
    report = healthcheck.collect(load_config(proc.config_path), readyz_timeout=0.5)
    said = next(p for p in report["problems"] if p.startswith("daemon is not running"))
    assert said.startswith("daemon is not running: its start was refused (exit 74): "), said
    line = next(x for x in healthcheck.format_text(report).splitlines() if x.startswith("daemon:"))
    assert "its start was refused (exit 74)" in line and "crashed" not in line, line
