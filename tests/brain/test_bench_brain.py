"""The context-assembly benchmark runs end to end on a small conversation."""

from __future__ import annotations

import argparse

from bot.bench import brain as bench


async def test_bench_brain_small_run() -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--turns", "30", "--repeat", "3", "--api"])
    result = await bench.run(args)
    assert result["turns"] == 30
    assert result["context_assembly"]["n"] == 3 and result["baseline_read_lines"]["n"] == 3
    shape = result["request_shape"]
    assert shape["tools"] == ["search_conversations", "fetch_context"]
    # every turn: they fit in the compression budget (session 40; seed 000's 20-turn
    # window, turns 12-31, before), and the new message
    assert shape["first_turn_in_context"] == 1 and shape["messages"] == 61
    assert result["full_reply_fake_api"]["n"] == 5
