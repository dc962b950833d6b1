"""A message written long before it came is labelled for the model with when, in the
owner's time zone (session 40: a Telegram update delivered 20 h late was answered as if
just said). Rebuilt from the transcript alone."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from bot.brain.context import transcript_turns
from bot.brain.late_turns import delay_text, late_label
from bot.brain.working_contexts import WorkingContexts
from bot.transcript import turn_line

ARRIVED = "2026-11-29T00:46:30.000Z"
BERLIN = ZoneInfo("Europe/Berlin")


def said_at(sent: str | None, text: str = "Remind me in 10 minutes to call mum") -> dict:
    meta = {"sentAt": sent} if sent else {}
    return turn_line("user", text, 1, timestamp=ARRIVED, metadata=meta)


def test_a_late_message_is_labelled_with_when_it_was_written_in_the_owners_zone() -> None:
    contexts = WorkingContexts(
        max_turns=20, max_tokens=100_000, keep_tokens=1000, zone=lambda: BERLIN
    )
    lines = [said_at("2026-11-28T04:46:00.000Z")]
    ctx = contexts.assemble("c1", lines, "Remind me in 10 minutes to call mum", 1)
    [turn] = ctx.turns  # the message answered is the transcript's: not added again
    assert turn.content == (
        "[Written Saturday 28 November 2026, 05:46 (Europe/Berlin); it reached you 20 h "
        "later.] Remind me in 10 minutes to call mum"
    )
    assert turn.said == "Remind me in 10 minutes to call mum"
    assert not ctx.shows_others  # the owner's own words, not a third party's


def test_a_message_on_time_or_dated_ahead_is_shown_as_it_is() -> None:
    for sent in (None, "2026-11-29T00:42:00.000Z", "2026-11-29T03:00:00.000Z", "not a date"):
        [turn] = transcript_turns([said_at(sent)])
        assert turn.content == "Remind me in 10 minutes to call mum" and turn.said is None
    reply = turn_line("assistant", "Sure.", 1, timestamp=ARRIVED, metadata={"sentAt": "2020"})
    assert late_label(reply, BERLIN) is None


def test_the_delay_reads_as_a_person_would_say_it() -> None:
    from datetime import timedelta

    assert delay_text(timedelta(minutes=7, seconds=20)) == "7 min"
    assert delay_text(timedelta(hours=20, seconds=40)) == "20 h"
    assert delay_text(timedelta(days=3, hours=2)) == "3 days"


def test_a_blank_late_message_keeps_its_placeholder_after_the_label() -> None:
    # Regression (session 42): "[Written …]" alone stood for a blank late message (a
    # photo without caption delivered late), read as its words.
    from bot.brain.restricted_context import EMPTY_MESSAGE

    [turn] = transcript_turns([said_at("2026-11-28T04:46:00.000Z", text="")])
    assert turn.content.startswith("[Written ") and turn.content.endswith(f"] {EMPTY_MESSAGE}")
