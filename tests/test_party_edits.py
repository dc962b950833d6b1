"""The rules of a stranger's edit notice (bot/party_edits.py, session 40), read from the
party's file alone: whether the owner was told of the message, and when of an edit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.events import InboundMessage, iso
from bot.party_edits import EDIT_NOTICE_SECONDS, edit_notice_due, escalated, message_key

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def escalation(refs: list[str], *, ago: float = 0, edit: bool = False) -> dict:
    line = {"type": "event", "event": "escalation", "text": "…", "refs": refs,
            "timestamp": iso(NOW - timedelta(seconds=ago))}  # fmt: skip
    return {**line, "edit": True} if edit else line


def test_an_edit_belongs_to_the_message_it_edits() -> None:
    edit = InboundMessage(
        channel="telegram", sender_id="2", text="[edited] x", message_id="2:7:edit:1:ab",
        chat_id="2", metadata={"edited": True, "original_message_id": "2:7"},
    )  # fmt: skip
    assert message_key(edit) == "2:7"
    lines = [{"type": "message", "direction": "in", "ref": "2:7"}, escalation(["2:7"])]
    assert escalated(lines, "2:7") and not escalated(lines, "2:8")
    # an escalation of before session 40 names no message: none is taken for it
    assert not escalated([{"type": "event", "event": "escalation", "text": "…"}], "2:7")


def test_one_edit_notice_per_party_in_ten_minutes_unless_the_clock_went_back() -> None:
    first = escalation(["2:7"], ago=3600)  # the escalation itself counts for nothing
    assert edit_notice_due([first], NOW)
    assert not edit_notice_due([first, escalation(["2:7"], ago=60, edit=True)], NOW)
    late = escalation(["2:7"], ago=EDIT_NOTICE_SECONDS, edit=True)
    assert edit_notice_due([first, late], NOW)
    assert edit_notice_due([first, escalation(["2:7"], ago=-3600, edit=True)], NOW)


def test_an_edit_notice_time_without_an_offset_is_utc_and_a_malformed_one_none() -> None:
    # Regression (session 42): an edit notice's time without an offset (the party's
    # file edited by hand) raised TypeError (aware now minus naive); it is UTC, like
    # every stored time (bot/moments.py). One that is no time holds nothing back.
    first = escalation(["2:7"], ago=3600)
    naive = {**escalation(["2:7"], ago=60, edit=True), "timestamp": "2026-11-28T11:59:00"}
    assert not edit_notice_due([first, naive], NOW)
    assert edit_notice_due([first, naive], NOW + timedelta(seconds=EDIT_NOTICE_SECONDS))
    for stamp in ("garbage", None, 17):
        assert edit_notice_due([first, {**naive, "timestamp": stamp}], NOW)
