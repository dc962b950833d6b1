"""Run the daemon and SIGKILL it at a named point of the code: a real kill -9, at a
moment a random kill under load would rarely hit.

``python -m tests.ops.crashpoint POINT run --config F``: patches the point, then runs
``bot.cli``. Points:

- ``command-answer:NAME``: an owner command ``/NAME`` ran (its effect is made) and its
  answer is about to be queued in the outbox.
- ``new-conversation``: ``/new`` has unpinned the current conversation and is about to
  create the fresh one.
- ``reply-row:N``: the N-th reply of the run is durable in its transcript and its
  outbox row is about to be written (what :func:`bot.resume.requeue_unsent_replies`
  makes good at the next start).
- ``page-check``: the daemon's check of every page of the index has read them and its
  result is about to be kept (:func:`bot.index_rescue.check_pages`).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def _kill() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _at_command_answer(name: str) -> None:
    from bot.outbox import Outbox

    original = Outbox.insert_unit

    def insert_unit(self: Outbox, msg: Any, dedup_key: str | None = None, **kw: Any) -> Any:
        if (dedup_key or "").endswith(":command") and msg.metadata.get("command") == name:
            print(f"crashpoint: killed before queueing the answer of /{name}", flush=True)
            _kill()
        return original(self, msg, dedup_key, **kw)

    Outbox.insert_unit = insert_unit  # type: ignore[method-assign]


def _at_new_conversation() -> None:
    from bot.conversations import ConversationManager

    original = ConversationManager.create

    async def create(self: ConversationManager, channel: str, **kw: Any) -> Any:
        if kw.get("reason") == "new":
            print("crashpoint: killed before /new created its conversation", flush=True)
            _kill()
        return await original(self, channel, **kw)

    ConversationManager.create = create  # type: ignore[method-assign]


def _at_reply_row(nth: int) -> None:
    from bot.outbox import Outbox

    original = Outbox.insert_unit
    replies = 0

    def insert_unit(self: Outbox, msg: Any, dedup_key: str | None = None, **kw: Any) -> Any:
        nonlocal replies
        unit = original(self, msg, dedup_key, **kw)
        if not kw.get("recoverable"):
            return unit
        replies += 1
        if replies != nth:
            return unit

        def killed(conn: Any) -> Any:  # run once the transcript turn is durable
            print(f"crashpoint: killed before the outbox row {dedup_key}", flush=True)
            _kill()

        return killed

    Outbox.insert_unit = insert_unit  # type: ignore[method-assign]


def _at_page_check() -> None:
    from bot import index_rescue

    original = index_rescue._quick_check

    async def quick_check(db: Any) -> str:
        result = await original(db)
        print(f"crashpoint: killed before keeping the page check's result ({result})", flush=True)
        _kill()
        return result

    index_rescue._quick_check = quick_check


def main() -> int:
    point, *argv = sys.argv[1:]
    kind, _, arg = point.partition(":")
    if kind == "command-answer":
        _at_command_answer(arg)
    elif kind == "new-conversation":
        _at_new_conversation()
    elif kind == "reply-row":
        _at_reply_row(int(arg))
    elif kind == "page-check":
        _at_page_check()
    else:
        raise SystemExit(f"unknown crash point {point!r}")
    from bot.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
