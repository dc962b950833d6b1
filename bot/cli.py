"""The ``my-agent`` command line (SPEC.md "Command line")."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from bot import exitcodes
from bot.config import AppConfig, ConfigError, default_config_path, load_config
from bot.labels import UNTITLED

log = logging.getLogger("my_agent.cli")

# Benchmark name -> module in bot.bench, where they differ.
BENCH_MODULES = {"locomo": "long_memory"}
BENCHMARKS = (
    "ingest",
    "search",
    "locomo",
    "ranker",
    "embed",
    "brain",
    "telegram",
    "email",
    "web",
    "soak",
)


def setup_logging(level: str = "INFO") -> None:
    fmt = "%(levelname)s %(name)s: %(message)s"
    if sys.stderr.isatty():
        fmt = "%(asctime)s " + fmt
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO), format=fmt, stream=sys.stderr, force=True
    )
    for noisy in ("aiosqlite", "aiohttp.access", "httpx", "httpcore", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _config(args: argparse.Namespace, secrets: bool = True) -> AppConfig:
    """The config; ``secrets=False`` for commands that only read the store (the daemon's
    API key, bot token and mail password may be absent from an operator's shell)."""
    return load_config(getattr(args, "config", None), secrets=secrets)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# -- commands -----------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from bot.daemon import run_daemon
    from bot.services import ChannelStartError, DatabaseOpenError, DataDirError, DataDirInUse

    config = _config(args)
    setup_logging(config.logging.level)
    source = args.config or default_config_path()
    log.info(
        "configuration: %s; data in %s", source or "embedded default", config.data_dir.resolve()
    )

    async def _main() -> int:
        return await run_daemon(config, config_path=Path(source) if source else None)

    try:
        code = asyncio.run(_main())
    except DataDirError as exc:
        log.error("%s", exc)
        code = exitcodes.EX_DATADIR
    except DatabaseOpenError as exc:
        log.error("%s", exc)
        code = exitcodes.EX_DATABASE
    except DataDirInUse as exc:
        log.error("%s", exc)
        code = exitcodes.EX_TEMPFAIL
    except ChannelStartError as exc:
        log.error("%s", exc)
        code = exitcodes.EX_UNAVAILABLE
    # Everything is closed and flushed. A worker thread still inside a library call (a
    # model download retrying with long sleeps) must not hold the exit hostage: not after
    # a stop, nor after a failed start (a port in use waited 40 s for fastembed's retries
    # offline before exiting 69, the unit "activating" all along).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = _config(args)
    source = args.config or default_config_path() or "embedded default"
    print(
        f"configuration OK ({source}): brain {config.brain_provider()}, data in "
        f"{config.data_dir}, channels: "
        + ", ".join(
            n
            for n in ("web", "telegram", "email", "loopback")
            if getattr(config.channels, n).enabled
        )
    )
    return exitcodes.OK


async def _with_services(
    config: AppConfig, fn: Any, recover_now: bool = True, download_models: bool = False
) -> Any:
    """``fn(services)`` on services opened for one command. One-shot commands do not
    download an embedding model (offline, fastembed's retries took ~40 s): they use
    ``embedding.model_path`` or the model cache; the daemon is the one that downloads."""
    from bot.health_daemon import data_dir_unreadable
    from bot.services import DatabaseOpenError, DataDirError, close_services, open_services

    unreadable = data_dir_unreadable(config.data_dir)
    if unreadable:
        # Reading commands never create a data directory: with a wrong path (a typo, the
        # wrong config) they answered "nothing here" and left an empty store behind.
        print(f"my-agent: {unreadable}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    try:
        services = await open_services(
            config, recover_now=recover_now, download_models=download_models
        )
    except (DataDirError, DatabaseOpenError) as exc:
        # the message names the file and the remedy; a traceback (exit 1) hid it
        print(f"my-agent: {exc}", file=sys.stderr)
        return exitcodes.EX_DATADIR if isinstance(exc, DataDirError) else exitcodes.EX_DATABASE
    try:
        return await fn(services)
    finally:
        await close_services(services)


def cmd_conversations(args: argparse.Namespace) -> int:
    config = _config(args, secrets=False)
    setup_logging("WARNING")

    from bot.owner_days import local_time, owner_zone

    zone = owner_zone(config)

    def when(stamp: Any) -> str:
        """A stored UTC time as the owner's local minute (``2026-03-01 20:30``): printed
        bare, UTC read as local time and put evenings west of UTC on the next day."""
        return local_time(str(stamp or ""), zone)[:16].replace("T", " ")

    async def _list(s: Any) -> int:
        records = await s.conversations.list(channel=args.channel, limit=args.limit)
        if args.json:
            _print_json([r.to_meta() for r in records])
            return 0
        for r in records:
            pin = " pinned" if r.pinned else ""
            print(
                f"{r.id}  {r.channel:<9} {when(r.updated)}  {r.turn_count:>4} turns{pin}  "
                f"{r.title or 'New conversation'}"
            )
        return 0

    async def _show(s: Any) -> int:
        rec = await s.conversations.get(args.id)
        if rec is None:
            print(f"no conversation {args.id}", file=sys.stderr)
            return 1
        lines = s.store.read_lines(args.id)
        if args.json:
            _print_json(
                {"conversation": rec.to_meta(), "abbreviation": rec.abbreviation, "lines": lines}
            )
            return 0
        print(f"{rec.title or 'New conversation'} ({rec.id}, {rec.channel}, model {rec.model})")
        if rec.abbreviation:
            print(f"Abbreviation: {rec.abbreviation}")
        for line in lines:
            if line.get("type") == "turn":
                who = line.get("sender") or line["role"]
                print(
                    f"[{line.get('turnNumber')}] {when(line.get('timestamp'))} {who}: "
                    f"{line.get('content')}"
                )
            elif line.get("type") == "event":
                print(
                    f"    ({line.get('event')}: "
                    f"{line.get('title') or line.get('text') or line.get('summary') or ''})"
                )
        return 0

    return int(asyncio.run(_with_services(config, _show if args.action == "show" else _list)))


def cmd_search(args: argparse.Namespace) -> int:
    config = _config(args, secrets=False)
    setup_logging("WARNING")

    async def _search(s: Any) -> int:
        from bot.owner_days import day_range, local_day, owner_zone

        await s.search.start()  # keyword-only without a model: the warning says why
        zone = owner_zone(config)  # --from/--to and the dates shown: the owner's days
        try:
            date_from, date_to = day_range(args.date_from, args.date_to, zone)
            page = await s.search.search(
                args.query,
                channel=args.channel,
                date_from=date_from,
                date_to=date_to,
                limit=args.limit,
                cursor=args.cursor,
            )
        except ValueError as exc:  # a date that is not one, a cursor of another query
            print(f"my-agent search: {exc}", file=sys.stderr)
            return exitcodes.EX_USAGE
        if args.json:
            _print_json(page.to_dict())
            return 0
        if not page.results:
            print(f"no match ({page.method})")
        for r in page.results:
            print(
                f"{r.score:.3f}  {r.conversation_id}  [{r.channel}] {r.title or UNTITLED} "
                f"({r.turn_range}, {local_day(r.timestamp, zone)})"
            )
            print(f"       {' '.join((r.snippet or '').split())[:150]}")
        if page.next_cursor:  # the plain listing can be paged too, not only --json
            found = f"{page.total}{'' if page.total_exact else '+'}"
            print(f"({len(page.results)} of {found} shown; next page: --cursor {page.next_cursor})")
        return 0

    return int(asyncio.run(_with_services(config, _search)))


def cmd_reindex(args: argparse.Namespace) -> int:
    from bot.health_daemon import data_dir_unreadable
    from bot.journal import journal_in_use
    from bot.recovery import delete_index

    config = _config(args, secrets=False)
    setup_logging(config.logging.level)
    unreadable = data_dir_unreadable(config.data_dir)
    if unreadable:  # before anything is deleted (an unlink denied was a traceback)
        print(f"my-agent: {unreadable}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    if journal_in_use(config.conversations_dir):
        # deleting the index under a running daemon would break its searches and writes
        log.error("my-agent is running on %s: stop it before reindexing", config.data_dir)
        return exitcodes.EX_TEMPFAIL
    delete_index(config.index_path)

    async def _rebuild(s: Any) -> int:
        report = s.recovery.to_dict() if s.recovery else {}
        if await s.search.start():
            report["vectors"] = await s.search.vectors.reindex_all()
        else:
            log.warning(
                "vectors not rebuilt here (no local embedding model or no sqlite-vec): "
                "the daemon embeds them at its next start once it has the model"
            )
        print(json.dumps(report))
        return 0

    return int(asyncio.run(_with_services(config, _rebuild)))


def cmd_status(args: argparse.Namespace) -> int:
    from bot import healthcheck

    config = _config(args, secrets=False)
    setup_logging("WARNING")
    return healthcheck.main(args, config)


def cmd_install_service(args: argparse.Namespace) -> int:
    from bot import service_unit

    return service_unit.main(args)


def bench_parser(name: str, config: str | None = None) -> tuple[Any, argparse.ArgumentParser]:
    """The benchmark module and its argument parser (``my-agent bench NAME ...``)."""
    module = importlib.import_module(f"bot.bench.{BENCH_MODULES.get(name, name)}")
    # A benchmark may define --config itself (it then runs standalone too): let it win.
    parser = _Parser(prog=f"my-agent bench {name}", conflict_handler="resolve")
    parser.add_argument("--json", action="store_true", help="print JSON (the default output)")
    parser.add_argument("--config", default=config)
    module.add_arguments(parser)
    if config is not None:
        # the CLI's own --config (given before or after the name) reaches the benchmark:
        # a module's own --config option (default None) replaced the default given above
        parser.set_defaults(config=config)
    return module, parser


def cmd_bench(args: argparse.Namespace, rest: Sequence[str]) -> int:
    setup_logging("WARNING")
    module, parser = bench_parser(args.name, args.config)
    bench_args = parser.parse_args(list(rest))
    result = asyncio.run(module.run(bench_args))
    _print_json(result)
    return 0


def _positive_int(text: str) -> int:
    """``--limit``: 0 listed nothing, and a negative one everything (SQLite's LIMIT -1)
    or, for search, the default page: neither what was asked."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (EX_USAGE, README's table), not argparse's 2; the
    sub-command parsers are of the same class."""

    # the ``bench`` sub-command's parser (build_parser sets it): its usage and help
    bench: argparse.ArgumentParser | None = None

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exitcodes.EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> _Parser:
    parser = _Parser(prog="my-agent", description=__doc__)
    parser.add_argument(
        "--config",
        help="config file (default: $MY_AGENT_CONFIG, "
        ".my_agent/config.yaml, else the embedded default)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, config_option: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        if config_option:
            p.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        return p

    add("run", "run the daemon")
    add("check-config", "validate the configuration (exit 78 when invalid)")
    conv = add("conversations", "read the conversation store")
    conv.add_argument("action", choices=("list", "show"))
    conv.add_argument("id", nargs="?")
    conv.add_argument("--channel")
    conv.add_argument("--limit", type=_positive_int, default=50)
    conv.add_argument("--json", action="store_true")
    search = add("search", "hybrid search over every conversation")
    search.add_argument("query")
    search.add_argument("--channel")
    search.add_argument("--limit", type=_positive_int, default=10)
    search.add_argument("--from", dest="date_from", help="turns on or after this ISO date")
    search.add_argument("--to", dest="date_to", help="turns on or before this ISO date")
    search.add_argument("--cursor", help="the next page: next_cursor of the previous --json")
    search.add_argument("--json", action="store_true")
    add("reindex", "rebuild conversations.db from the transcripts")
    status = add("status", "daemon health, counts, pending work, index consistency")
    install = add("install-service", "write the systemd unit", config_option=False)
    try:
        from bot import healthcheck, service_unit

        healthcheck.add_arguments(status)
        service_unit.add_arguments(install)
    except ImportError:  # pragma: no cover
        pass
    # No -h of its own: ``bench NAME --help`` must reach the benchmark's parser, which
    # knows its options (:func:`cmd_bench`); ``bench --help`` alone lists the names.
    bench = sub.add_parser("bench", help=f"benchmarks: {', '.join(BENCHMARKS)}", add_help=False)
    bench.add_argument("--config", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    bench.add_argument("name", nargs="?", choices=BENCHMARKS)
    parser.bench = bench
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
    if args.command == "conversations" and args.action == "show" and not args.id:
        parser.error("conversations show needs an ID")
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
        print(f"configuration error: {exc}", file=sys.stderr)
        return exitcodes.EX_CONFIG
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `my-agent conversations list | head`: the reader has what it wanted. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.EX_PIPE


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
