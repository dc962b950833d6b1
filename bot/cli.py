"""The ``my-agent`` command line (README.md "Command line")."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from bot import exitcodes, redaction, service_unit
from bot.cli_bench import BENCHMARKS, bench_parser, cmd_bench
from bot.cli_common import (
    Parser,
    command_config,
    forgiving_output,
    positive_int,
    setup_logging,
    status_arguments,
)
from bot.cli_reindex import cmd_reindex
from bot.cli_search import cmd_search
from bot.cli_store import cmd_conversations
from bot.config import ConfigError, default_config_path
from bot.config.channels import ChannelsConfig

log = logging.getLogger("my_agent.cli")

# Re-exported: the benchmarks' names and parsers are part of this module's interface.
__all__ = ["BENCHMARKS", "bench_parser", "build_parser", "main", "setup_logging"]


CONFIG_HELP = (
    "config file (default: $MY_AGENT_CONFIG, .my_agent/config.yaml, else the embedded default)"
)
VERBOSE_HELP = "on an internal error (exit 70), print its traceback, not only one line"
CHANNELS = ", ".join(ChannelsConfig.model_fields)


# -- commands -----------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from bot.daemon import run_daemon
    from bot.services import ChannelStartError, DatabaseOpenError, DataDirError, DataDirInUse
    from bot.status_file import STATUS_FILE_NAME, record_exit

    config = command_config(args)
    redaction.use_config(config)  # masked in the log from its first line
    setup_logging(config.logging.level)
    source = args.config or default_config_path()
    log.info(
        "configuration: %s; data in %s", source or "embedded default", config.data_dir.resolve()
    )
    from bot.config.checks import channel_warnings, secret_warnings

    for warning in secret_warnings(config) + channel_warnings(config):
        log.warning("%s", warning)

    async def _main() -> int:
        return await run_daemon(config, config_path=Path(source) if source else None)

    reason = ""
    try:
        code = asyncio.run(_main())
    except DataDirError as exc:
        log.error("%s", exc)
        code, reason = exitcodes.EX_DATADIR, str(exc)
    except DatabaseOpenError as exc:
        log.error("%s", exc)
        code, reason = exitcodes.EX_DATABASE, str(exc)
    except DataDirInUse as exc:
        log.error("%s", exc)
        code, reason = exitcodes.EX_TEMPFAIL, str(exc)
    except ChannelStartError as exc:
        log.error("%s", exc)
        code, reason = exitcodes.EX_UNAVAILABLE, str(exc)
    except ConfigError as exc:  # met while starting: as when the file is read (main)
        for line in exc.lines():
            log.error("configuration error: %s", line)
        code, reason = exitcodes.EX_CONFIG, f"configuration error: {exc.lines()[0]}"
    except Exception as exc:
        # The daemon's log is where its traceback belongs (systemd's journal); then the
        # same exit as the end below, or a worker thread could keep the process alive.
        log.exception("internal error: the daemon stops")
        code, reason = exitcodes.EX_SOFTWARE, f"internal error: {type(exc).__name__}: {exc}"
    if code != exitcodes.OK:
        # daemon.json said "starting" after a refused start, which `my-agent status` read
        # as a daemon killed or crashed (before session 42): the exit and why, instead
        record_exit(config.data_dir / STATUS_FILE_NAME, code, reason)
    # Everything is closed and flushed. A worker thread still inside a library call (a
    # model download retrying with long sleeps) must not hold the exit hostage: not after
    # a stop, nor after a failed start (a port in use waited 40 s for fastembed's retries
    # offline before exiting 69, the unit "activating" all along).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_check_config(args: argparse.Namespace) -> int:
    from bot.config.checks import config_warnings

    config = command_config(args)
    # Settings the daemon starts with but cannot use as they are (a missing model folder,
    # a host name that does not resolve): warned about, not refused (exit 0).
    for warning in config_warnings(config):
        print(f"warning: {warning}", file=sys.stderr)
    source = args.config or default_config_path() or "embedded default"
    enabled = config.channels.enabled()
    print(
        f"configuration OK ({source}): brain {config.brain_provider()}, data in "
        f"{config.data_dir.resolve()}, channels: {', '.join(enabled) or 'none'}"
    )
    return exitcodes.OK


def cmd_status(args: argparse.Namespace) -> int:
    from bot import healthcheck

    config = command_config(args, secrets=False)
    setup_logging("WARNING")
    return healthcheck.main(args, config)


def cmd_install_service(args: argparse.Namespace) -> int:
    from bot import service_unit

    return service_unit.main(args)


def build_parser() -> Parser:
    # The module's docstring was the description: ``my-agent --help`` opened on
    # 'The ``my-agent`` command line (SPEC.md "Command line").', a file owners do not have.
    parser = Parser(
        prog="my-agent",
        description="my-agent: a personal AI assistant daemon, and the commands that read "
        "its store. `my-agent COMMAND --help` describes one command.",
    )
    parser.add_argument("--config", help=CONFIG_HELP)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, config_option: bool = True) -> argparse.ArgumentParser:
        # description: ``my-agent run --help`` said nothing of what the command does;
        # --config and --verbose are listed, as README documents ``run [--config F]``
        # (SUPPRESS as default: one given before the command still counts).
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )
        if config_option:
            p.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
        return p

    add("run", "run the daemon")
    add("check-config", "validate the configuration (exit 78 when invalid)")
    conv = add("conversations", "read the conversation store")
    conv.add_argument(
        "action", choices=("list", "show"), help="list: most recent first; show: one transcript"
    )
    conv.add_argument("id", nargs="?", help="show: the conversation's id (conv-...)")
    conv.add_argument("--channel", help=f"list: only this channel ({CHANNELS})")
    conv.add_argument(
        "--limit", type=positive_int, default=50, help="list: at most this many (default 50)"
    )
    conv.add_argument("--json", action="store_true", help="print JSON (exact, for scripts)")
    search = add("search", "hybrid search over every conversation")
    search.add_argument("query", help="words or a question; found by meaning too with a model")
    search.add_argument("--channel", help=f"only this channel ({CHANNELS})")
    search.add_argument(
        "--limit", type=positive_int, default=10, help="results per page (default 10)"
    )
    search.add_argument(
        "--from",
        dest="date_from",
        metavar="DATE",
        help="turns on or after this day (YYYY-MM-DD, a day of owner.timezone)",
    )
    search.add_argument(
        "--to",
        dest="date_to",
        metavar="DATE",
        help="turns on or before this day (YYYY-MM-DD, a day of owner.timezone)",
    )
    search.add_argument(
        "--conversation", metavar="ID", help="only this conversation (an id of a result)"
    )
    search.add_argument("--cursor", help="the next page: next_cursor of the previous --json")
    search.add_argument("--json", action="store_true", help="print the page as JSON")
    reindex = add("reindex", "rebuild conversations.db from the transcripts")
    reindex.add_argument("--json", action="store_true", help="print the report as JSON")
    reindex.add_argument(
        "--vectors",
        action="store_true",
        help="embed the vectors now (progress on stderr; Ctrl-C keeps what is embedded),"
        " not leave them to the daemon's start",
    )
    status = add("status", "daemon health, counts, pending work, index consistency")
    install = add("install-service", "write the systemd unit", config_option=False)
    status_arguments(status)
    service_unit.add_arguments(install)
    # No -h of its own: ``bench NAME --help`` must reach the benchmark's parser, which
    # knows its options (:func:`cmd_bench`); ``bench --help`` alone lists the names.
    bench = sub.add_parser(
        "bench",
        help=f"benchmarks: {', '.join(BENCHMARKS)}",
        description="Run one benchmark (JSON with --json); `my-agent bench NAME --help` "
        "lists its options.",
        add_help=False,
    )
    bench.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    bench.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    )
    bench.add_argument("name", nargs="?", choices=BENCHMARKS)
    parser.bench = bench
    parser.conversations = conv
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    forgiving_output()  # before anything is printed, the usage and --help too
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode (surrogateescape)
            # a usage error, not a traceback from deep inside SQLite or the index
            parser.error(f"argument {arg!r} is not valid UTF-8")
    args, rest = parser.parse_known_args(argv)
    if args.command != "bench" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    # the command's own usage ("my-agent conversations [-h] ... {list,show} [id]"): the
    # top-level one listed every command and showed nowhere where the ID goes
    conversations = parser.conversations or parser
    if args.command == "conversations" and args.action == "show" and not args.id:
        conversations.error("show needs an ID: a conv-... of conversations list")
    if args.command == "conversations" and args.action == "list" and args.id:
        # `conversations list conv-...` (show meant) listed everything and exited 0
        conversations.error(f"conversations list takes no ID ({args.id!r}): conversations show ID")
    handlers = {
        "run": cmd_run,
        "check-config": cmd_check_config,
        "conversations": cmd_conversations,
        "search": cmd_search,
        "reindex": cmd_reindex,
        "status": cmd_status,
        "install-service": cmd_install_service,
    }
    if args.command == "bench" and args.name is None:
        bench_usage = parser.bench or parser
        if {"-h", "--help"} & set(rest):
            bench_usage.print_help()
            bench_usage.exit(0)
        bench_usage.error("a benchmark name is required")
    try:
        if args.command == "bench":
            return cmd_bench(args, rest)
        return handlers[args.command](args)
    except ConfigError as exc:
        for line in exc.lines():  # one line per wrong key
            print(f"configuration error: {line}", file=sys.stderr)
        return exitcodes.EX_CONFIG
    except KeyboardInterrupt:
        return exitcodes.EX_INTERRUPTED
    except BrokenPipeError:
        # `my-agent conversations list | head`: the reader has what it wanted. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.EX_PIPE
    except Exception as exc:
        # A bug, not the operator's mistake: one line saying so (the traceback of a
        # command was 30 lines ending in exit 1, which `status` uses for "a problem is
        # listed"), the whole traceback with --verbose.
        if args.verbose:
            traceback.print_exc()
        print(
            f"my-agent {args.command}: internal error: {type(exc).__name__}: {exc}"
            + ("" if args.verbose else " (--verbose shows the traceback)"),
            file=sys.stderr,
        )
        return exitcodes.EX_SOFTWARE


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
