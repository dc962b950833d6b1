"""Run the daemon and SIGKILL it at a named point of the code: a real kill -9, at a
moment a random kill under load would rarely hit.

``python -m tests.ops.crashpoint POINT run --config F``: patches the point, then runs
``bot.cli``. Points:

- ``command-answer:NAME``: an owner command ``/NAME`` ran (its effect is made) and its
  answer is about to be queued in the outbox.
- ``new-conversation``: ``/new`` has unpinned the current conversation and is about to
  create the fresh one.
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


def main() -> int:
    point, *argv = sys.argv[1:]
    kind, _, arg = point.partition(":")
    if kind == "command-answer":
        _at_command_answer(arg)
    elif kind == "new-conversation":
        _at_new_conversation()
    else:
        raise SystemExit(f"unknown crash point {point!r}")
    from bot.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
