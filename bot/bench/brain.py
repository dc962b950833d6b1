"""``my-agent bench brain``: working-context assembly time on a long conversation.

A conversation of ``--turns`` turns (default 2,000; user + assistant each) is written
through the real conversation manager into a temporary data directory. Then, per
iteration, with the session state cleared so every run is a full hydration:

- **baseline**: the bare transcript read (``ConversationManager.read_lines``: file read +
  JSON parse of every line), which any approach has to pay;
- **assembly**: :meth:`AnthropicBrain.build_request`, everything the brain does before
  the first API call (read, record lookup, compression summary lookup, tail window,
  token estimate, persona + system prompt, messages, tool definitions). The first
  iteration also summarises the turns before the window (the fake's echo): a hydration
  past the budget does (bot.brain.context); the later ones load the turns after it.

Optionally (``--api``) a full streamed reply against the local fake Messages API
(``bot.bench.fakes.anthropic_api``) through the real SDK, to put the assembly share in
perspective. Results: median / p95 in milliseconds and the request shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.brain.base import BrainRequest

WORDS = (
    "boiler plumber invoice garden tomatoes deploy staging server backup tax return trip "
    "Lisbon flight hotel meeting Sarah pricing contract renewal budget review dentist "
    "friday monday report draft ideas recipe pumpkin soup running shoes marathon training"
).split()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=2000, help="turns in the conversation")
    parser.add_argument("--repeat", type=int, default=50, help="timed iterations per measure")
    parser.add_argument("--words", type=int, default=40, help="average words per message")
    parser.add_argument(
        "--api",
        action="store_true",
        help="also time full replies against the local fake Messages API",
    )
    parser.add_argument("--seed", type=int, default=7)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _stats(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "median_ms": round(statistics.median(ms), 3),
        "p95_ms": round(_percentile(ms, 0.95), 3),
        "min_ms": round(min(ms), 3),
        "n": len(ms),
    }


def _sentence(rng: random.Random, words: int) -> str:
    n = max(3, int(rng.gauss(words, words / 3)))
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from anthropic import AsyncAnthropic

    from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
    from bot.brain.anthropic import AnthropicBrain
    from bot.config.model import AppConfig, BrainConfig, EmbeddingConfig, TranscriptConfig
    from bot.services import close_services, open_services

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-brain-") as tmp:
        fake = FakeAnthropicAPI(fallback="echo")
        await fake.start()
        config = AppConfig(
            data_dir=Path(tmp) / "data",
            brain=BrainConfig(provider="anthropic", api_key="bench", base_url=fake.base_url),
            embedding=EmbeddingConfig(enabled=False),
            transcripts=TranscriptConfig(fsync="never"),
        )
        services = await open_services(config)
        client = AsyncAnthropic(api_key="bench", base_url=fake.base_url, max_retries=0)
        brain = AnthropicBrain(config, services, client)
        try:
            manager = services.conversations
            rec = await manager.create("telegram")
            started = time.perf_counter()
            for _ in range(args.turns):
                await manager.append_turn(rec.id, "user", _sentence(rng, args.words))
                await manager.append_turn(rec.id, "assistant", _sentence(rng, args.words))
            last = "What did we decide about the boiler and the Lisbon trip?"
            await manager.append_turn(rec.id, "user", last)
            build_seconds = time.perf_counter() - started
            path = services.store.path(rec.id)
            request = BrainRequest(
                profile="owner",
                channel="telegram",
                text=last,
                model_alias="sonnet",
                conversation_id=rec.id,
            )

            baseline: list[float] = []
            assembly: list[float] = []
            params: dict[str, Any] = {}
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                await asyncio.to_thread(manager.read_lines, rec.id)
                baseline.append(time.perf_counter() - t0)
                brain.contexts.forget(rec.id)  # a full hydration every time
                t0 = time.perf_counter()
                params = await brain.build_request(request)
                assembly.append(time.perf_counter() - t0)

            messages = params["messages"]
            shape = {
                "system_chars": len(params["system"]),
                "system_tokens_est": len(params["system"]) // 4,
                "messages": len(messages),
                "message_chars": sum(len(m["content"]) for m in messages),
                "tools": [t["name"] for t in params["tools"]],
                "tools_json_chars": len(json.dumps(params["tools"])),
                "max_tokens": params["max_tokens"],
                "first_turn_in_context": brain.contexts.session_start(rec.id),
            }
            result: dict[str, Any] = {
                "turns": args.turns,
                "transcript_bytes": path.stat().st_size,
                "setup_seconds": round(build_seconds, 2),
                "baseline_read_lines": _stats(baseline),
                "context_assembly": _stats(assembly),
                "assembly_over_baseline_ms": round(
                    (statistics.median(assembly) - statistics.median(baseline)) * 1000, 3
                ),
                "request_shape": shape,
            }
            if args.api:
                replies: list[float] = []
                for _ in range(max(5, args.repeat // 5)):
                    t0 = time.perf_counter()
                    await brain.reply(request)
                    replies.append(time.perf_counter() - t0)
                result["full_reply_fake_api"] = _stats(replies)
            return result
        finally:
            await client.close()
            await close_services(services)
            await fake.close()


def main() -> None:  # pragma: no cover - manual runs: python -m bot.bench.brain
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
