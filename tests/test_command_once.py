"""A command with effects runs at most once per received message, also when the daemon
is killed between its effect and its answer (bot/command_runs.py).

The real daemon runs as a child process (tests/ops/daemon.py) and is SIGKILLed at the
exact point (tests/ops/crashpoint.py); the test is the channel that redelivers the
message nobody acknowledged, with the same message id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.loopback import read_json_lines
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import Loopback, base_config, owner_turns, sent, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    d = DaemonProcess(tmp_path, base_config(tmp_path))
    yield d
    await d.close()


def answers(data_dir: Path, message_id: str) -> list[dict[str, Any]]:
    return [r for r in sent(data_dir) if r["kind"] == "command" and r["inReplyTo"] == message_id]


async def killed_while_answering(
    daemon: DaemonProcess,
    loop: Loopback,
    name: str,
    text: str,
    message_id: str,
    point: str = "",
) -> None:
    """Deliver ``text`` to a daemon that is killed at ``point`` (by default right before
    it queues the answer of ``/name``), then deliver it again (nobody acknowledged it) to
    a restarted daemon. A daemon started with that point already is not restarted."""
    target = point or f"command-answer:{name}"
    if daemon.crash_at != target:
        await daemon.terminate()
        daemon.crash_at = target
        await daemon.start()
    assert await loop.post("owner", text, message_id) is None  # no acknowledgement
    assert daemon.proc is not None and await daemon.proc.wait() == -9, daemon.log()
    assert "crashpoint: killed" in daemon.log()
    daemon.crash_at = None
    await daemon.start()
    assert await loop.post("owner", text, message_id) == 200, daemon.log()
    await wait_until(lambda: answers(daemon.data_dir, message_id) != [], 30, "the answer", daemon)


@pytest.mark.parametrize("point", ["command-answer:new", "new-conversation"])
async def test_new_killed_before_its_answer_makes_one_conversation(
    daemon: DaemonProcess, session: aiohttp.ClientSession, point: str
) -> None:
    # command-answer: the fresh conversation exists, its answer is not queued;
    # new-conversation: the current one is unpinned, the fresh one not created yet.
    loop = Loopback(daemon, session)
    daemon.crash_at = point  # (only /new reaches it: no restart before the command)
    await daemon.start()
    assert await loop.post("owner", "hello about tomatoes", "m1") == 200
    await killed_while_answering(daemon, loop, "new", "/new", "m2", point)
    assert await loop.post("owner", "and now about peppers", "m3") == 200
    await wait_until(
        lambda: any(r["inReplyTo"] == "m3" for r in sent(daemon.data_dir)), 30, "reply", daemon
    )
    assert await daemon.terminate() == 0, daemon.log()
    convs = owner_turns(daemon.data_dir)
    # the first conversation and the one /new made: no empty extra one from the rerun
    assert len(convs) == 2, {c: len(t) for c, t in convs.items()}
    by_message = {
        t["metadata"]["messageId"]: c for c, ts in convs.items() for t in ts if t["role"] == "user"
    }
    assert by_message["m1"] != by_message["m3"]
    [answer] = answers(daemon.data_dir, "m2")
    assert "Started a new conversation" in answer["text"]


async def test_rename_and_reply_killed_before_their_answers_run_once(
    daemon: DaemonProcess, session: aiohttp.ClientSession
) -> None:
    loop = Loopback(daemon, session)
    daemon.crash_at = "command-answer:rename"  # (only /rename reaches it)
    await daemon.start()
    assert await loop.post("owner", "hello", "m1") == 200
    assert await loop.post("stranger1", "hi, who is this?", "s1") == 200
    await killed_while_answering(daemon, loop, "rename", "/rename Garden plans", "m2")
    await killed_while_answering(daemon, loop, "reply", "/reply stranger1 It is me.", "m3")
    assert await daemon.terminate() == 0, daemon.log()
    [conv] = [p for p in (daemon.data_dir / "conversations").glob("conv-*.jsonl")]
    lines = read_json_lines(conv)
    titles = [x for x in lines if x.get("title") == "Garden plans"]
    assert len(titles) == 1, titles
    recorded = [x for x in lines if x.get("event") == "command"]
    assert [x["command"] for x in recorded] == ["/rename", "/reply"], recorded  # once each
    to_party = Counter(r["text"] for r in sent(daemon.data_dir) if r["chat"] == "stranger1")
    assert to_party["It is me."] == 1, to_party
    [party_file] = (daemon.data_dir / "external").glob("*.jsonl")
    outbound = [x for x in read_json_lines(party_file) if x.get("content") == "It is me."]
    assert len(outbound) == 1, outbound
