"""The recall results of one reply are bounded, so the model's context window is not.

Regression: ``fetch_context`` returns up to 40 turns of 4,000 characters (about 41,000
tokens) and nothing bounded what a reply collected over its tool rounds: a model reading
a long conversation page by page, or several at once, sent more than the model's
200,000-token window, the API answered 400 ("prompt is too long") and the owner got
"the model service rejected the request" for everything the tools had gathered.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted, estimate_tokens
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainRequest
from bot.brain.context import estimate_tokens as context_tokens
from bot.brain.tool_budget import TOOL_RESULTS_MAX_TOKENS
from tests.brain.conftest import seed_conversation

WINDOW = 200_000  # the models' context window, in the fake's estimate


def within_window(answer: Scripted) -> Any:
    """A responder that refuses an over-long prompt as the real API does."""

    def respond(body: dict[str, Any]) -> Scripted:
        size = estimate_tokens({k: body.get(k) for k in ("system", "messages", "tools")})
        if size > WINDOW:
            return Scripted(
                status=400, error_message=f"prompt is too long: {size} tokens > {WINDOW} maximum"
            )
        return answer

    return respond


def fetch(conv_id: str, first: int, last: int) -> Scripted:
    block = Block("tool_use", name="fetch_context")
    block.input = {"conversationId": conv_id, "turnRange": {"from": first, "to": last}}
    return Scripted([block])


async def test_many_large_recall_results_stay_within_the_context_window(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # a long conversation of long messages (pasted logs, mails): 120 turns (240 messages
    # of 4,000 characters)
    long_turns = [
        ("user" if i % 2 == 0 else "assistant", f"turn {i} " + "log line words " * 266)
        for i in range(240)
    ]
    old = await seed_conversation(core, long_turns, title="Server logs")
    conv = await seed_conversation(core, [("user", "Go through the whole log conversation")])
    for page in range(6):  # the model reads it 20 turns at a time
        fake_api.push(within_window(fetch(old, page * 20 + 1, page * 20 + 20)))
    fake_api.push(within_window(Scripted([Block("text", text="Here is what the logs say.")])))

    reply = await brain.reply(
        BrainRequest(
            profile="owner",
            channel="web",
            text="Go through the whole log conversation",
            model_alias="sonnet",
            conversation_id=conv,
        )
    )

    assert reply.text == "Here is what the logs say.", reply.text
    assert not reply.extra.get("error")
    results = [
        b
        for m in fake_api.requests[-1].body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 6
    assert sum(context_tokens(r["content"]) for r in results) <= TOOL_RESULTS_MAX_TOKENS + 6 * 100
    # the first page comes whole; the second is cut to what is left at a whole turn and
    # says which turns it left out; the pages past the budget are errors saying so
    assert not results[0]["is_error"] and len(unwrap(results[0]["content"])["turns"]) == 40
    second = unwrap(results[1]["content"])
    assert not results[1]["is_error"]
    shown = sorted({t["turnNumber"] for t in second["turns"]})
    assert shown == list(range(21, shown[-1] + 1)) and shown[-1] < 40
    assert second["note"].startswith(f"turns {shown[-1] + 1}-40 left out")
    assert len([t for t in second["turns"] if t["turnNumber"] == shown[-1]]) == 2
    assert all(r["is_error"] and "budget" in r["content"] for r in results[2:])


def unwrap(content: str) -> dict[str, Any]:
    assert content.startswith('<recalled_data source="fetch_context">')
    return json.loads(content.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0])


async def test_chinese_recall_results_stay_within_the_context_window(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the budget was 192,000 characters, about 48,000 tokens of English but
    # 192,000 of Chinese (a token a character): two pages of a long Chinese conversation
    # filled the model's window and the whole reply was refused as too long.
    line = "服务器日志显示磁盘已满，请检查第四十二号扇区并清理旧文件。"
    long_turns = [
        ("user" if i % 2 == 0 else "assistant", f"turn {i} " + (line * 140)[:3990])
        for i in range(240)
    ]
    old = await seed_conversation(core, long_turns, title="服务器日志")
    conv = await seed_conversation(core, [("user", "把日志对话全部看一遍")])

    def within(answer: Scripted) -> Any:
        def respond(body: dict[str, Any]) -> Scripted:
            sent = {k: body.get(k) for k in ("system", "messages", "tools")}
            size = context_tokens(json.dumps(sent, ensure_ascii=False))
            if size > WINDOW:
                message = f"prompt is too long: {size} tokens > {WINDOW} maximum"
                return Scripted(status=400, error_message=message)
            return answer

        return respond

    for page in range(6):
        fake_api.push(within(fetch(old, page * 20 + 1, page * 20 + 20)))
    fake_api.push(within(Scripted([Block("text", text="日志说磁盘满了。")])))
    reply = await brain.reply(
        BrainRequest(
            profile="owner",
            channel="web",
            text="把日志对话全部看一遍",
            model_alias="sonnet",
            conversation_id=conv,
        )
    )
    assert reply.text == "日志说磁盘满了。", reply.text
    results = [
        b
        for m in fake_api.requests[-1].body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert sum(context_tokens(r["content"]) for r in results) <= TOOL_RESULTS_MAX_TOKENS + 6 * 100
    assert not results[0]["is_error"] and "note" in unwrap(results[0]["content"])
