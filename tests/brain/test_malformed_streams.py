"""A streamed answer whose events do not fit together is asked again, as a garbled one is.

Regression (session 40): only data that is not JSON (ValueError) was asked again. A delta
for a block that never started (IndexError), a stream without message_start (LookupError
reading its message) and a text_delta without its text (TypeError) ended the owner's
reply in the apology after one request, though docs/brain.md promised up to three.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.anthropic_api import UnreadableAnswer
from tests.brain.conftest import Deltas, owner_request, seed_conversation


def frame(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


START = frame(
    {
        "type": "message_start",
        "message": {
            "id": "msg_x",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        },
    }
)
BLOCK_START = frame(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
DELTA = frame(
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi."}}
)
NO_TEXT = frame({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}})
END = frame(
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 3},
    }
) + frame({"type": "message_stop"})

MALFORMED = {
    "delta-of-a-block-never-started": START + DELTA + END,
    "no-message-start": BLOCK_START + DELTA + END,
    "text-delta-without-text": START + BLOCK_START + NO_TEXT + END,
}


def malformed(name: str) -> Scripted:
    return Scripted(raw=MALFORMED[name], raw_type="text/event-stream")


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_events_that_do_not_fit_together_are_asked_again(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, name: str
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(malformed(name))
    fake_api.push_text("Here it is.")
    reply = await brain.reply(owner_request("hello", conv), Deltas())
    assert reply.text == "Here it is." and len(fake_api.requests) == 2
    # Always malformed: a few attempts, then a failure (not an outage to wait out).
    for _ in range(3):
        fake_api.push(malformed(name))
    with pytest.raises(UnreadableAnswer):
        await brain.reply(owner_request("hello", conv), Deltas())
    assert len(fake_api.requests) == 5
