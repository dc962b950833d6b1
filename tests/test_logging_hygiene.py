"""The root logger a test leaves behind (tests/conftest.py's ``_root_logging_kept``).

The two tests run in this order, in one worker (pytest-xdist hands out whole files): the
first sets up logging as the daemon's command does in process, the second finds the root
logger as it was. Before session 29 the second found the first's level (INFO, or WARNING
after a one-shot command) and a handler writing to the first test's closed capture
file: a failing daemon test's log was a page of "I/O operation on closed file"."""

from __future__ import annotations

import logging
import sys

from bot.cli_common import setup_logging

_BEFORE: dict[str, int] = {}


def test_a_command_run_in_process_sets_up_logging() -> None:
    _BEFORE["level"] = logging.getLogger().level
    setup_logging("DEBUG")
    assert logging.getLogger().level == logging.DEBUG != _BEFORE["level"]
    assert any(
        type(h) is logging.StreamHandler and getattr(h, "stream", None) is sys.stderr
        for h in logging.getLogger().handlers
    )


def test_the_next_test_finds_the_root_logger_as_it_was() -> None:
    root = logging.getLogger()
    assert root.level == _BEFORE["level"]
    assert not [h for h in root.handlers if type(h) is logging.StreamHandler]
    logging.getLogger("my_agent.test").info("seen")  # no "I/O operation on closed file"
