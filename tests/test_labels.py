"""Conversation labels as the channels show them (bot.labels)."""

from __future__ import annotations

from bot.labels import UNTITLED, clip_title, display_title, plain_title

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


def test_a_title_that_names_the_contact_is_not_labelled_again() -> None:
    # Regression: a Telegram conversation's automatic title names its contact, and
    # /search and /status said "Owner · Owner — Sicilian Chess Clubs".
    meta = {"contact": "Ann"}
    assert display_title("telegram", "Ann — Chess Club", meta, []) == "Ann — Chess Club"
    assert display_title("telegram", "Chess Club", meta, []) == "Ann · Chess Club"
    assert display_title("telegram", "Annual — Review", meta, []) == "Ann · Annual — Review"


def test_titles_are_free_of_control_characters() -> None:
    # Regression: clip_title only folded white space, so a NUL, an ESC sequence or a C1
    # control stayed in a title (journalctl showed its log line as "[blob data]").
    assert plain_title("Tax\x00return\x1b[31m 2026\x85\x9f\x7f") == "Tax return [31m 2026"
    assert clip_title("\x00\x07 Trip\x1bplan \x00") == "Trip plan"
    assert clip_title("\x00\x01\x9b") == ""
    # what is not a control stays: a zero-width joiner spells emoji and words
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert clip_title(f"{family} Café") == f"{family} Café"
    # a title stored before the fix is shown without them (phone, /search, /status)
    assert display_title("web", "Tax\x00return\x1b", {}, []) == "Tax return"
    assert display_title("web", "\x00\x07", {}, []) == UNTITLED
