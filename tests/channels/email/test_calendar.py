"""Calendar invitations (channels/email/calendar.py). Outlook sends an invitation as a
``text/calendar; method=REQUEST`` body alone: before session 25 it was named as a file
(``[attachment: text/calendar, 266 bytes]``) and the event's date, place and notes
reached nobody. Now they are the turn's text; an attached .ics stays a file."""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from pathlib import Path

from channels.email.calendar import calendar_text
from channels.email.parsing import parse_message
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.stack import (
    GOOD_AUTH,
    OWNER,
    Stack,
    drain,
    open_in_new_folder,
    user_turns,
    wait_ref,
)

ANN = "ann@example.net"
# As Outlook writes it: CRLF, folded lines, escapes, a quoted CN with a colon in it.
OUTLOOK = (
    "BEGIN:VCALENDAR\r\n"
    "PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN\r\n"
    "METHOD:REQUEST\r\n"
    "BEGIN:VTIMEZONE\r\nTZID:GMT Standard Time\r\nEND:VTIMEZONE\r\n"
    "BEGIN:VEVENT\r\n"
    'ORGANIZER;CN="Owner: Home":mailto:owner@example.org\r\n'
    "ATTENDEE;ROLE=REQ-PARTICIPANT;RSVP=TRUE:mailto:bot@example.com\r\n"
    "DESCRIPTION;LANGUAGE=en-US:Bring the x-rays\\, and the insurance card.\\n\r\n"
    " Parking behind the building.\r\n"
    "SUMMARY;LANGUAGE=en-US:Dentist\r\n"
    "DTSTART;TZID=GMT Standard Time:20250120T100000\r\n"
    "DTEND;TZID=GMT Standard Time:20250120T110000\r\n"
    "LOCATION;LANGUAGE=en-US:Rua Augusta 12\\; 2nd floor\r\n"
    "END:VEVENT\r\n"
    "END:VCALENDAR\r\n"
)


def _invite(body: str, method: str | None = "REQUEST", subject: str = "Dentist") -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Owner <{OWNER}>"
    msg["To"] = "bot@example.com"
    msg["Subject"] = subject
    msg["Message-ID"] = "<inv-1@example.org>"
    msg["Date"] = "Tue, 14 Jan 2025 09:12:00 +0100"
    msg["Authentication-Results"] = GOOD_AUTH
    msg.set_content(body, subtype="calendar", params={"method": method} if method else {})
    return msg.as_bytes()


def test_an_outlook_invitation_is_read_as_its_event() -> None:
    parsed = parse_message(_invite(OUTLOOK))
    assert parsed.text == (
        "Calendar invitation: Dentist\n"
        "When: 2025-01-20 10:00-11:00 (GMT Standard Time)\n"
        "Where: Rua Augusta 12; 2nd floor\n"
        "Organizer: Owner: Home <owner@example.org>\n"
        "\n"
        "Bring the x-rays, and the insurance card.\n"
        "Parking behind the building."
    )
    assert parsed.attachments == ()


def test_times_days_and_what_the_calendar_says_it_is() -> None:
    utc = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:Call\nDTSTART:20250120T090000Z\nEND:VEVENT\n"
    assert calendar_text(utc) == "Calendar event: Call\nWhen: 2025-01-20 09:00 (UTC)"
    days = (
        "BEGIN:VCALENDAR\nMETHOD:CANCEL\nBEGIN:VEVENT\nSUMMARY:Offsite\n"
        "DTSTART;VALUE=DATE:20250120\nDTEND;VALUE=DATE:20250122\nEND:VEVENT\n"
    )
    assert calendar_text(days) == (
        "Calendar cancellation: Offsite\nWhen: 2025-01-20 to 2025-01-22 (end excluded)"
    )
    answer = (
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:Dentist\n"
        "ATTENDEE;PARTSTAT=ACCEPTED;CN=Ann:mailto:ann@example.net\nEND:VEVENT\n"
    )
    assert calendar_text(answer, "REPLY") == (
        "Calendar reply: Dentist\nAnswer: Ann <ann@example.net>: accepted"
    )
    # No event (a to-do, a free/busy answer, junk): left to be named as a file.
    assert calendar_text("BEGIN:VCALENDAR\nBEGIN:VTODO\nEND:VTODO\n") is None
    assert calendar_text("not a calendar at all") is None


def test_what_the_sender_wrote_in_it_is_text_without_controls() -> None:
    evil = (
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:Hi\x1b[2J\x00 there\n"
        "DESCRIPTION:" + "x" * 5000 + "\nEND:VEVENT\n"
    )
    text = calendar_text(evil)
    assert text is not None
    assert text.startswith("Calendar event: Hi[2J there\n")
    assert text.endswith("x" * 999 + "…") and len(text) < 1100


def test_an_attached_ics_stays_a_file_and_an_unreadable_calendar_too() -> None:
    msg = EmailMessage()
    msg["From"] = f"Owner <{OWNER}>"
    msg["Subject"] = "Lunch"
    msg.set_content("You have been invited to Lunch, Tuesday at noon.")
    msg.add_attachment(
        OUTLOOK.encode(), maintype="application", subtype="ics", filename="invite.ics"
    )
    parsed = parse_message(msg.as_bytes())
    assert parsed.text.strip() == "You have been invited to Lunch, Tuesday at noon."
    assert [a.name for a in parsed.attachments] == ["invite.ics"]
    broken = parse_message(_invite("BEGIN:VCALENDAR\nEND:VCALENDAR\n"))
    assert [a.mime_type for a in broken.attachments] == ["text/calendar"]


async def test_the_owner_s_invitation_reaches_the_turn(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, _invite(OUTLOOK, subject="Invitation: Dentist"))
    await smtp.capture.wait_for(1)
    conv = await wait_ref(stack, "<inv-1@example.org>")
    [turn] = user_turns(stack, conv)
    assert turn.startswith("Subject: Invitation: Dentist\n\nCalendar invitation: Dentist\n")
    assert "When: 2025-01-20 10:00-11:00" in turn and "insurance card" in turn
    page = await stack.services.search.search("x-rays")
    assert conv in {r.conversation_id for r in page.results}


def _answer(
    method: str = "REPLY",
    partstat: str = "ACCEPTED",
    comment: str = "",
    *,
    n: int = 1,
    sender: str = "ann@example.net",
    subject: str = "Accepted: Dentist",
    typed: str = "",
) -> bytes:
    """An attendee's answer as Outlook sends it: a text part (empty, or what they typed)
    beside ``text/calendar; method=...``; no Auto-Submitted."""
    calendar = (
        f"BEGIN:VCALENDAR\r\nMETHOD:{method}\r\nBEGIN:VEVENT\r\nSUMMARY:Dentist\r\n"
        "DTSTART;TZID=Europe/Lisbon:20250120T100000\r\n"
        "DTEND;TZID=Europe/Lisbon:20250120T110000\r\n"
        f"ATTENDEE;PARTSTAT={partstat};CN=Ann:mailto:{sender}\r\n"
        + (f"COMMENT:{comment}\r\n" if comment else "")
        + "ORGANIZER:mailto:bot@example.com\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    msg = EmailMessage()
    msg["From"] = f"Ann <{sender}>"
    msg["To"] = "bot@example.com"
    msg["Subject"] = subject
    msg["Message-ID"] = f"<answer-{n}@example.net>"
    msg["Date"] = "Tue, 14 Jan 2025 09:30:00 +0100"
    msg["Authentication-Results"] = GOOD_AUTH.replace("example.org", "example.net")
    msg.set_content(typed)
    msg.add_alternative(calendar, subtype="calendar", params={"method": method})
    return msg.as_bytes()


def test_a_calendar_answer_is_automatic_mail_saying_who_answered_what() -> None:
    # Before session 26 it was a person's mail (answered by the model, a known
    # contact's; acknowledged and escalated, a stranger's), its text the empty text part.
    accepted = parse_message(_answer())
    assert accepted.auto_submitted
    assert accepted.calendar_answer == (
        "Calendar reply: Dentist\nWhen: 2025-01-20 10:00-11:00 (Europe/Lisbon)\n"
        "Organizer: bot@example.com\nAnswer: Ann <ann@example.net>: accepted"
    )
    # What the attendee typed (the text part, or the calendar's COMMENT) is kept.
    typed = parse_message(_answer(partstat="DECLINED", typed="Sorry, I am away that week."))
    assert typed.auto_submitted and typed.text.strip() == "Sorry, I am away that week."
    counter = parse_message(_answer("COUNTER", "TENTATIVE", "Could we make it 11?"))
    assert counter.auto_submitted and counter.calendar_answer is not None
    assert counter.calendar_answer.startswith("Calendar counter-proposal: Dentist\n")
    assert counter.calendar_answer.endswith(
        "Ann <ann@example.net>: tentative\nComment: Could we make it 11?"
    )
    # An invitation is no answer (the owner's "add this to my notes" is answered), nor
    # is an answer the owner forwards to ask about it.
    assert not parse_message(_invite(OUTLOOK)).auto_submitted
    forwarded = parse_message(_answer(subject="Fwd: Accepted: Dentist", typed="Who is Ann?"))
    assert not forwarded.auto_submitted and forwarded.calendar_answer is None


async def test_calendar_answers_are_recorded_not_answered(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, stack = await open_in_new_folder(
        pymap, smtp, tmp_path, stacks, lambda c: c.trust.contacts.update({"email": {ANN: "known"}})
    )
    await append(pymap.port, folder, _answer(sender=ANN))
    counter = _answer("COUNTER", "TENTATIVE", "Could we make it 11?", n=2, sender=ANN)
    await append(pymap.port, folder, counter)
    async with asyncio.timeout(30):
        while True:
            parties = await stack.services.external.list_parties()
            said = [
                str(m["content"])
                for p in parties
                for m in await stack.services.external.messages(p.id)
            ]
            if len(said) == 2:
                break
            await asyncio.sleep(0.05)
    assert said[0].startswith("Subject: Accepted: Dentist\n\nCalendar reply: Dentist\n")
    assert said[0].endswith("Answer: Ann <ann@example.net>: accepted")
    assert "Comment: Could we make it 11?" in said[1]
    await asyncio.sleep(1.0)  # time for any (wrong) answer to be generated and queued
    await drain(stack)
    # The owner hears of it (an escalation); Ann, a known contact, gets no model reply.
    assert [m["To"] for _, m in smtp.capture.messages if m["To"] != OWNER] == []
