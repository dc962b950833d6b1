"""``my-agent bench NAME``: the benchmarks of :mod:`bot.bench`, each with its own options."""

from __future__ import annotations

import argparse
import asyncio
import importlib
from collections.abc import Sequence
from typing import Any

from bot.cli_common import Parser, print_json, setup_logging

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


def bench_parser(name: str, config: str | None = None) -> tuple[Any, argparse.ArgumentParser]:
    """The benchmark module and its argument parser (``my-agent bench NAME ...``)."""
    module = importlib.import_module(f"bot.bench.{BENCH_MODULES.get(name, name)}")
    # A benchmark may define --config itself (it then runs standalone too): let it win.
    parser = Parser(prog=f"my-agent bench {name}", conflict_handler="resolve")
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
    print_json(result)
    return 0
