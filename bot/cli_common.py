"""Helpers shared by the ``my-agent`` commands (:mod:`bot.cli` and its command modules):
logging set-up, the configuration, JSON output and the argument parser's class."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import Any, NoReturn

from bot import exitcodes, redaction
from bot.config import AppConfig, load_config


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr (with times on a terminal; systemd's journal adds its own), the
    secrets of :data:`bot.redaction.SECRETS` masked."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if sys.stderr.isatty():
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), format=fmt, stream=sys.stderr, force=True
    )
    # The secrets masked in every line (bot/redaction.py; the daemon sets which): before
    # session 40 an aiohttp error naming a Bot API URL logged the bot token.
    redaction.install(logging.getLogger().handlers)
    # httpx2/httpcore2: the HTTP library under anthropic 2.x, which logged every model
    # call (and every retry of an outage) as an INFO "HTTP Request: POST ..." line
    noisy = ("aiosqlite", "aiohttp.access", "httpx", "httpcore", "httpx2", "httpcore2")
    for name in (*noisy, "apscheduler"):
        logging.getLogger(name).setLevel(logging.WARNING)


def command_log_level(level: str) -> str:
    """A one-shot command's log level: WARNING, or DEBUG when the config asks for it.
    Its report is on stdout; INFO lines on stderr (``reindex`` printed the recovery's
    dict, the databases created) were noise around it, and the daemon's INFO setting is
    not a wish to see them here."""
    return "DEBUG" if level == "DEBUG" else "WARNING"


def command_config(args: argparse.Namespace, secrets: bool = True) -> AppConfig:
    """The config; ``secrets=False`` for commands that only read the store (the daemon's
    API key, bot token and mail password may be absent from an operator's shell)."""
    return load_config(getattr(args, "config", None), secrets=secrets)


# C0 and C1 control characters but newline and tab: ESC, CSI (U+009B), BEL, CR, ...
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` for a terminal, its control characters shown as ``\\x1b`` escapes.

    Transcripts hold what others wrote too (a group's members, a mail's subject): printed
    raw, an escape sequence in them could clear the screen, rewrite the lines above, set
    the window title or the clipboard of the owner's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def forgiving_output() -> None:
    """Characters the terminal's encoding lacks printed as ``\\u6771`` escapes, not raised.

    Before session 41 a terminal whose locale is not UTF-8 (en_US.ISO-8859-1, or
    PYTHONIOENCODING=iso-8859-1) got exit 70 "internal error: UnicodeEncodeError" part-way
    through ``conversations show``, ``search`` or ``status`` when stored text held such a
    character (a Japanese title, a dash). Escapes rather than "?" (errors="replace"): the
    text stays readable and what was there can still be told apart (two titles differing in
    those characters only), as :func:`printable` shows control characters. A stream that
    already has an error handler other than "strict" (PYTHONIOENCODING=latin-1:replace) is
    left as the owner asked."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            reconfigure(errors="backslashreplace")


def print_text(text: str) -> None:
    """A line of stored text on stdout, its control characters escaped (:func:`printable`)."""
    print(printable(text))


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (dates and paths as strings); ``\\u`` escapes
    for every non-ASCII character when stdout is not UTF-8, so the JSON stays exact there
    (the backslash escapes of :func:`forgiving_output` are not JSON's for U+10000 up)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    utf8 = encoding in ("utf8", "utf8sig")
    print(json.dumps(data, indent=2, ensure_ascii=not utf8, default=str))


# The largest ``--limit``: more conversations than a store holds (list everything with
# it), and far below SQLite's integers (2**63 - 1).
MAX_LIMIT = 1_000_000


def positive_int(text: str) -> int:
    """``--limit``: 0 listed nothing, and a negative one everything (SQLite's LIMIT -1)
    or, for search, the default page: neither what was asked. Above :data:`MAX_LIMIT` it
    is a usage error too: before session 41 ``--limit 99999999999999999999`` reached
    SQLite and ended in exit 70, "internal error: OverflowError"."""
    try:
        value = int(text)
    except ValueError:  # also more than 4,300 digits (Python's own bound)
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {value}")
    if value > MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_LIMIT} (more than a store holds): {text[:40]}"
        )
    return value


class Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (EX_USAGE, README's table), not argparse's 2; the
    sub-command parsers are of the same class."""

    # the ``bench`` sub-command's parser (build_parser sets it): its usage and help
    bench: argparse.ArgumentParser | None = None
    # ``conversations``' parser: its usage errors show its usage, not the command list
    conversations: argparse.ArgumentParser | None = None

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exitcodes.EX_USAGE, f"{self.prog}: error: {message}\n")


def status_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``my-agent status`` (the CLI adds --config). Here, not in
    :mod:`bot.healthcheck`: building the parser imported the whole store with it (numpy
    included), 0.45 s of every command's start, ``--help`` and ``check-config`` too."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="skip FTS5's integrity-check and counting every transcript's turn lines "
        "(large stores: transcripts are compared by size)",
    )
    parser.add_argument(
        "--pages",
        action="store_true",
        help="also read every page of conversations.db now (SQLite's quick check of the "
        "whole file: seconds to a minute per GB, by the disk; the daemon does it once a "
        "day, and status reports its last result without this option)",
    )
