"""Grapheme-cluster cuts (bot.graphemes): a cut never splits what a reader sees as one."""

from __future__ import annotations

import pytest

from bot.graphemes import (
    boundary_before,
    cut,
    has_rtl,
    isolate,
    shorten,
    shown_invisible,
    utf16_boundary_before,
)

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl
FLAGS = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"  # FR DE
THUMB = "\U0001f44d\U0001f3fd"  # thumbs up, medium skin tone


@pytest.mark.parametrize(
    ("text", "clusters"),
    [
        ("cafe\u0301", ["c", "a", "f", "e\u0301"]),
        ("नमस्ते", ["न", "म", "स्ते"]),
        ("ক্ষমা", ["ক্ষ", "মা"]),
        (FAMILY + "a", [FAMILY, "a"]),
        (FLAGS, [FLAGS[:2], FLAGS[2:]]),
        (THUMB + THUMB, [THUMB, THUMB]),
        ("\u1100\u1161\u11a8\u1100", ["\u1100\u1161\u11a8", "\u1100"]),
        ("a\r\nb", ["a", "\r\n", "b"]),
        ("x\ufe0f!", ["x\ufe0f", "!"]),
    ],
)
def test_every_cut_falls_between_clusters(text: str, clusters: list[str]) -> None:
    ends = {0}
    at = 0
    for cluster in clusters:
        at += len(cluster)
        ends.add(at)
    for i in range(len(text) + 1):
        j = boundary_before(text, i)
        assert j in ends and j <= i
        assert max(e for e in ends if e <= i) == j


def test_flags_pair_up_from_the_start_of_the_run() -> None:
    three = FLAGS + FLAGS[:2]
    assert [cut(three, n) for n in range(7)] == ["", "", FLAGS[:2], FLAGS[:2], FLAGS, FLAGS, three]


def test_a_pair_of_surrogates_is_never_split() -> None:
    pair = "\U0001f600".encode("utf-16-le").decode("utf-16-le", "surrogatepass")
    wide = "a" + "\ud83d\ude00"
    assert cut(wide, 2) == "a"
    assert len(pair) == 1  # Python keeps an astral character as one code point


def test_a_cluster_longer_than_the_cut_still_cuts() -> None:
    zalgo = "e" + "\u0301" * 100
    assert cut(zalgo, 40) == zalgo[:40]
    assert cut("e\u0301\u0301\u0301x", 3) == ""


def test_shorten_counts_its_mark_and_keeps_the_cluster() -> None:
    text = "Résumé " + FAMILY * 3
    short = shorten(text, 14)
    assert len(short) <= 14 and short.endswith("…")
    assert short == "Résumé " + FAMILY + "…"
    assert shorten("short", 10) == "short"


def test_utf16_boundary_counts_astral_characters_twice() -> None:
    text = THUMB * 5  # 4 UTF-16 units each
    assert utf16_boundary_before(text, 9) == 4  # two thumbs: 8 units
    assert utf16_boundary_before("abc", 2) == 2


def test_isolate_only_right_to_left_text() -> None:
    assert isolate("plain title") == "plain title"
    assert isolate("שלום") == "\u2068שלום\u2069"
    assert has_rtl("مرحبا") and not has_rtl("日本語")


def test_isolate_shows_bidi_controls_planted_in_the_text() -> None:
    # Regression: a right-to-left override in a message reached Telegram bare in /search
    # and the offline recall: the rest of the line, the conversation id included, was
    # shown reversed, and "invoice_\u202egnp.exe" read as an image's name.
    assert isolate("invoice_\u202egnp.exe (conv-1)") == "invoice_[U+202E]gnp.exe (conv-1)"
    assert isolate("a\u2066b\u202cc") == "a[U+2066]b[U+202C]c"
    # an isolate of ours is kept, and one that holds a planted control is shown
    assert isolate("\u2068שלום\u2069") == "\u2068\u2068שלום\u2069\u2069"
    assert isolate("\u2068x\u202ey\u2069") == "[U+2068]x[U+202E]y[U+2069]"


def test_shown_invisible_writes_out_what_shows_nothing() -> None:
    # as the dashboard's nameShown: "Ha\u200bnan" read exactly as Hanan (session 40:
    # the Analytics chart showed them live)
    assert shown_invisible("Ha\u200bnan\ufeff\u00ad") == "Ha[U+200B]nan[U+FEFF][U+00AD]"
    # the joiners emoji sequences and Persian names need do their work
    assert shown_invisible(FAMILY) == FAMILY
    assert shown_invisible("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == (
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    )
