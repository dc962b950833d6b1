"""Conversation labels as the channels show them (bot.labels)."""

from __future__ import annotations

from bot.labels import UNTITLED, display_title

FSI, PDI = "\u2068", "\u2069"


def test_a_right_to_left_part_is_isolated_in_the_line() -> None:
    # Regression: "דוד · Tax return" laid out right to left put the English title before
    # the Hebrew name, and an Arabic title pulled our " · " and the brackets after it.
    meta = {"contact": "דוד"}
    assert display_title("telegram", "Tax return", meta, []) == f"{FSI}דוד{PDI} · Tax return"
    assert display_title("web", "خطة 2024", {}, []) == f"{FSI}خطة 2024{PDI}"
    # left-to-right text is left as it was: nothing to isolate
    assert display_title("telegram", "Tax return", {"contact": "Ann"}, []) == "Ann · Tax return"
    assert display_title("web", None, {}, []) == UNTITLED
