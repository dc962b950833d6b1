"""Conversations not in English: token estimates by script, and what they decide (when
compression fires, where a long message is cut)."""

from __future__ import annotations

from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic_api import _usage_so_far
from bot.brain.base import HistoryTurn
from bot.brain.context import ContextTurn, cut_to_tokens, estimate_tokens, restricted_messages
from tests.brain.conftest import ManualClock, make_brain, make_config, owner_request, uncached
from tests.brain.conftest import seed_conversation as seed

CHINESE = "我们明天下午三点在公司楼下的咖啡店见面，讨论一下新项目的预算和时间表。"
JAPANESE = "昨日は東京タワーに行って、夜景の写真をたくさん撮りました。"


def test_english_estimates_are_unchanged() -> None:
    for text in ("", "a", "hello world", "x" * 4001):
        assert estimate_tokens(text) == (len(text) + 3) // 4


def test_cjk_emoji_and_cyrillic_are_estimated_by_their_script() -> None:
    # Regression: characters / 4 made 1,000 Chinese characters (about 1,000 tokens or
    # more for the model's tokenizer) 250 tokens.
    assert estimate_tokens(CHINESE * 20) >= len(CHINESE * 20)
    assert estimate_tokens(JAPANESE * 20) >= len(JAPANESE * 20)
    assert estimate_tokens("한국어 문장입니다" * 50) >= 7 * 50
    assert estimate_tokens("😀" * 100) >= 200
    assert estimate_tokens("Привет" * 100) >= 300  # about 2 characters a token
    mixed = "Meeting at 3pm: " + CHINESE
    assert estimate_tokens(mixed) >= len(CHINESE) + 4


def test_a_long_chinese_message_is_cut_to_its_tokens() -> None:
    # Regression: a turn over the limit was cut at limit * 4 characters, four times the
    # budget in Chinese: a pasted Chinese document stayed too big to send.
    turn = ContextTurn("user", CHINESE * 200, 3)
    capped = turn.capped(1000)
    assert estimate_tokens(capped.content) <= 1000 + 40  # the note
    assert capped.content.startswith(CHINESE) and "more characters not shown" in capped.content
    english = ContextTurn("user", "word " * 2000, 3).capped(1000)
    # its start and its end (a third of it), the note between them
    assert english.content.startswith("word " * 500) and english.content.endswith("word " * 250)
    assert len(english.content) < 4200
    assert cut_to_tokens("ab東" * 100, 51) == ("ab東" * 100)[:102]  # 34 of 1.5 tokens


def test_restricted_messages_cut_chinese_to_the_budget() -> None:
    # Regression: cut at 500 * 4 characters, a Chinese message kept 2,000 tokens.
    merged = restricted_messages([HistoryTurn("user", "你好")], CHINESE * 100, 500)
    assert len(merged[-1]["content"]) <= 500 + len(" [...truncated]")


async def test_a_chinese_conversation_is_compressed_at_its_budget(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression: twelve Chinese messages of 400 characters (about 5,000 tokens) were
    # estimated at 1,200: compression waited for four times the budget, by which time a
    # real conversation was past the model's window and every reply was refused.
    config = make_config(tmp_path, fake_api, compression_budget_tokens=3000)
    brain = make_brain(config, core, ManualClock())
    try:
        text = (CHINESE * 10)[:400]
        turns = [(role, f"{n} {text}") for n in range(1, 7) for role in ("user", "assistant")]
        conv = await seed(core, [*turns, ("user", "总结一下")])
        fake_api.push(Scripted([Block("text", text="摘要：预算和时间表。")]))
        fake_api.push_text("好的。")
        reply = await brain.reply(owner_request("总结一下", conv))
        assert reply.text == "好的。"
        assert [uncached(r.body)["model"] for r in fake_api.requests] == [
            "claude-haiku-4-5",
            "claude-sonnet-4-6",
        ]
        assert "摘要：预算和时间表。" in uncached(fake_api.requests[1].body)["system"]
    finally:
        await brain.client.close()


def test_a_stopped_chinese_stream_is_billed_by_its_tokens() -> None:
    # Regression: the output of a stream stopped before message_delta was the streamed
    # text at four characters a token: a quarter of a Chinese answer's cost.
    assert _usage_so_far(object(), CHINESE * 10).output >= len(CHINESE * 10)
