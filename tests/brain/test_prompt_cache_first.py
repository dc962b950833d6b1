"""The first request of a conversation with prompt caching: its message breakpoint costs
a quarter of the message's own tokens once (the system prompt before it is written, or
read, by the system breakpoint either way), and the next request of the conversation, or
the next tool round, reads it. The figures are in docs/brain.md (``pytest -s`` prints
them)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.base import Usage
from tests.brain.conftest import big, make_config, seed_conversation
from tests.brain.test_prompt_cache import Now, answer, cached_brain

SHORT = "What time is my dentist appointment?"
LONG = big(1, "user") * 4  # about 430 tokens


async def costs(
    tmp_path: Path, core: SimpleNamespace, text: str, *, cache: bool, warm: bool, messages: int
) -> list[tuple[Usage, float]]:
    """(usage, cost) of each of ``messages`` owner messages two minutes apart in a new
    conversation; ``warm``: another conversation's reply came first (its system prompt,
    the same, is in the cache)."""
    async with FakeAnthropicAPI(fallback="echo", prompt_cache=True) as fake:
        now = Now()
        brain = cached_brain(make_config(tmp_path, fake, prompt_cache=cache), core, now)
        try:
            if warm:
                other = await seed_conversation(core, [])
                await answer(brain, core, other, "an earlier conversation's message")
            conv = await seed_conversation(core, [])
            out = []
            for n in range(messages):
                reply = await answer(brain, core, conv, f"{text} ({n})")
                assert reply.usage is not None and reply.cost is not None
                out.append((reply.usage, reply.cost))
                now.value += timedelta(minutes=2)
            return out
        finally:
            await brain.client.close()


@pytest.mark.parametrize("text", [SHORT, LONG], ids=["short", "long"])
async def test_the_first_messages_breakpoint_costs_a_quarter_of_the_message_once(
    tmp_path: Path, core: SimpleNamespace, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    [(off, off_cost)] = await costs(
        tmp_path / "off", core, text, cache=False, warm=False, messages=1
    )
    [(cold, cold_cost)] = await costs(
        tmp_path / "cold", core, text, cache=True, warm=False, messages=1
    )
    (warm, warm_cost), (second, second_cost) = await costs(
        tmp_path / "warm", core, text, cache=True, warm=True, messages=2
    )
    # Cold: everything is written once (1.25x), the system prompt included, breakpoint
    # on the message or not.
    assert cold.cache_read == 0 and cold.cache_write > 0.9 * off.input
    # Warm: the system prompt is read; what is written is the message alone (its own
    # tokens, and the reply's before the second).
    assert warm.cache_read > 0 and warm.cache_write < warm.all_input - warm.cache_read
    assert warm_cost < off_cost
    # The second message reads everything the first wrote.
    assert second.cache_read >= warm.cache_read + warm.cache_write
    price = 3.0 / 1e6  # sonnet's input
    extra = warm.cache_write * 0.25 * price  # what the message breakpoint adds
    with capsys.disabled():
        print(
            f"\n{len(text)} chars: off ${off_cost:.6f} ({off.input} in); cold"
            f" ${cold_cost:.6f} (write {cold.cache_write}); warm ${warm_cost:.6f} (read"
            f" {warm.cache_read}, write {warm.cache_write}: +${extra:.6f} for the message"
            f" breakpoint); second ${second_cost:.6f} (read {second.cache_read}, write"
            f" {second.cache_write})"
        )
