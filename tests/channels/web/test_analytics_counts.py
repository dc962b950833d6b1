"""What the Analytics panel counts, against ``my-agent status`` and ``/status``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot import healthcheck
from bot.command_status import conversation_lines
from channels.web.analytics import Analytics
from tests.channels.web.conftest import start_stack, stop_stack


async def test_status_and_analytics_count_the_same_turns(tmp_path: Path) -> None:
    # Regression (session 40): `my-agent status` said "6 turns" of the stored messages,
    # where /status and the dashboard's Analytics said 3 (a question and its reply
    # share a turn number).
    stack = await start_stack(tmp_path / "data")
    try:
        manager = stack.services.conversations
        conv = await manager.create("web")
        for i in range(3):
            await manager.append_turn(conv.id, "user", f"question {i}")
            await manager.append_turn(conv.id, "assistant", f"answer {i}")
        totals = await Analytics(stack.channel).totals()
        rec = await manager.get(conv.id)
        assert rec is not None
        slash = conversation_lines(stack.services, rec, "t")[1]
        report = await asyncio.to_thread(healthcheck.collect, stack.config, deep=False)
    finally:
        await stop_stack(stack)
    assert totals["turns"] == 3 and "3 turns" in slash
    counts = report["counts"]
    assert counts["turn_numbers"] == totals["turns"]
    assert counts["turns"] == 6  # the key keeps its meaning: stored messages
    text = healthcheck.format_text(report)
    assert "(web 1), 6 messages in 3 turns\n" in text, text
