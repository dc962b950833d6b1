"""Previews, snippets and quotes cut on a grapheme boundary, wherever the product cuts
text (titles: tests/lifecycle/test_naming.py; the helper: tests/test_graphemes.py).

Each case was cut by code points before: the last character shown was a consonant
without its vowel sign, half a flag, a hand without its skin tone, a family emoji cut to
"man + ZWJ"."""

from __future__ import annotations

from email import message_from_string
from zoneinfo import ZoneInfo

from bot.brain.context import cut_to_tokens, transcript_turns
from bot.brain.recall_fetch import _turn_view
from bot.events import OutboundMessage
from bot.extractive import _clip
from bot.graphemes import boundary_before
from bot.search.fusion import snippet
from bot.search.query import MAX_QUERY_CHARS, bounded_query
from bot.send_failures import alert_text
from channels.email.decoding import MAX_HEADER_CHARS, decode_header_value
from channels.email.dsn import read_bounce
from channels.telegram.quoting import _excerpt
from channels.web.analytics import _clip as chart_clip

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one character, five code points
THUMB = "\U0001f44d\U0001f3fd"  # thumbs up, medium skin tone
FLAG = "\U0001f1eb\U0001f1f7"  # FR
HINDI = "क्षत्रिय"  # three characters, eight code points


def _whole(shown: str, text: str) -> bool:
    """``shown`` (its "…" or "..." dropped) is a start of ``text`` ending between
    characters."""
    body = shown.removesuffix("…").removesuffix("...").rstrip()
    return text.startswith(body) and boundary_before(text, len(body)) == len(body)


def test_the_brains_token_cut_keeps_whole_characters() -> None:
    text = HINDI * 100
    for tokens in range(1, 40):
        assert _whole(cut_to_tokens(text, tokens), text)


def test_a_search_snippet_starts_and_ends_between_characters() -> None:
    text = FLAG * 150 + " boiler " + THUMB * 150
    shown = snippet(text, ["boiler"], width=101)
    body = shown.strip("…")
    assert body in text
    start = text.index(body)
    assert boundary_before(text, start) == start
    assert boundary_before(text, start + len(body)) == start + len(body)


def test_a_long_query_is_cut_between_characters() -> None:
    query = "ab" + HINDI * (MAX_QUERY_CHARS // len(HINDI) + 5)
    assert _whole(bounded_query(query), query)


def test_the_undelivered_preview_keeps_whole_characters() -> None:
    text = "x" * 77 + FAMILY
    alert = alert_text(OutboundMessage(channel="telegram", chat_id="1", text=text), "refused")
    assert '"' + "x" * 77 + '…"' in alert


def test_the_chart_titles_keep_whole_characters() -> None:
    assert chart_clip("y" * 8 + THUMB + "z", 10) == "y" * 8 + "…"


def test_spaceless_notes_sentences_keep_whole_characters() -> None:
    thai = "ที่" * 40
    assert _whole(_clip(thai, 5), thai)


def test_a_fetched_turn_is_cut_between_characters() -> None:
    content = "w" * 99 + FAMILY + "tail"
    view = _turn_view({"content": content, "turnNumber": 1}, ZoneInfo("UTC"), 100)
    assert view["content"].startswith("w" * 99 + " [...truncated: 9 more characters")


def test_a_telegram_reply_quote_keeps_whole_characters() -> None:
    quote = "ab" + HINDI * 20
    assert _whole(_excerpt(quote), quote)


def test_an_endless_header_is_cut_between_characters() -> None:
    value = "ab" + HINDI * (MAX_HEADER_CHARS // len(HINDI) + 2)
    assert _whole(decode_header_value(value), value)


def test_a_bounce_diagnostic_keeps_whole_characters() -> None:
    diagnostic = "z" * 196 + FAMILY + " mailbox unavailable"
    raw = (
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\n\n'
        "--B\nContent-Type: text/plain\n\nUndelivered.\n"
        "--B\nContent-Type: message/delivery-status\n\n"
        "Reporting-MTA: dns; mx.example\n\nFinal-Recipient: rfc822; a@example.com\n"
        f"Action: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; {diagnostic}\n"
        "--B--\n"
    )
    found = read_bounce(message_from_string(raw), lambda _: [])
    assert found is not None
    assert found.diagnostic.endswith("z" * 196 + "...")  # not the man of the family


def test_a_group_members_name_is_cut_between_characters() -> None:
    # the owner's context labels another member's message with their name, 60 at most
    line = {
        "type": "turn",
        "role": "user",
        "content": "hi",
        "turnNumber": 1,
        "fromOwner": False,
        "sender": "n" * 59 + FLAG,
    }
    (turn,) = transcript_turns([line])
    assert turn.member == "n" * 59  # not half a flag
