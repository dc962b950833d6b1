"""The restricted profile's message list (bot.brain.restricted_context.restricted_messages)."""

from bot.brain.base import HistoryTurn
from bot.brain.restricted_context import EMPTY_MESSAGE, restricted_messages


def test_history_before_the_message_alternating_and_starting_with_user() -> None:
    history = [
        HistoryTurn("assistant", "welcome"),
        HistoryTurn("user", "hi"),
        HistoryTurn("user", "are you there?"),
        HistoryTurn("assistant", "yes"),
        HistoryTurn("user", "what time is it?"),
    ]
    messages = restricted_messages(history, "what time is it?", budget=1000)
    assert messages == [
        {"role": "user", "content": "hi\n\nare you there?"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "what time is it?"},
    ]


def test_oldest_history_dropped_past_the_budget() -> None:
    history = [HistoryTurn("user", "x" * 400), HistoryTurn("assistant", "short answer")]
    messages = restricted_messages(history, "next question", budget=20)
    # The 100-token turn no longer fits, and the assistant turn cannot lead.
    assert messages == [{"role": "user", "content": "next question"}]


def test_an_oversized_message_is_cut_and_marked() -> None:
    text = "word " * 400
    messages = restricted_messages([HistoryTurn("user", text)], text, budget=50)
    assert len(messages) == 1
    assert messages[0]["content"].endswith(" [...truncated]")
    assert len(messages[0]["content"]) == 50 * 4 + len(" [...truncated]")


def test_a_blank_message_and_blank_history_are_named_not_sent_empty() -> None:
    # The API answers 400 to empty or whitespace-only text: a known contact's blank
    # mail (empty subject and body) got "Sorry, I can't help with that." instead.
    history = [HistoryTurn("user", " \n"), HistoryTurn("assistant", "noted")]
    messages = restricted_messages(history, "", budget=1000)
    assert messages == [
        {"role": "user", "content": EMPTY_MESSAGE},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": EMPTY_MESSAGE},
    ]
