"""A calendar invitation (iCalendar, RFC 5545) as the lines a person reads in it.

Outlook sends an invitation as a ``text/calendar; method=REQUEST`` body and nothing
else: the event's time, place and notes are only in it. Before session 25 it was named
as a file (``[attachment: text/calendar, 266 bytes]``), and the owner asking "add the
dentist to my notes" had the assistant see a subject and no date. Only what a calendar
shows is read (the first event's summary, start and end, place, organizer, notes),
never run or trusted: the text is the sender's, like a body.
"""

from __future__ import annotations

import re
from email.message import Message

from channels.email.mime_parts import content_type, own_parts, part_text

# What the METHOD of the calendar says the mail is (RFC 5546).
_KINDS = {
    "REQUEST": "Calendar invitation",
    "CANCEL": "Calendar cancellation",
    "REPLY": "Calendar reply",
    "COUNTER": "Calendar counter-proposal",
    "DECLINECOUNTER": "Calendar counter-proposal declined",
    "REFRESH": "Calendar update request",
}
# What an attendee's calendar sends back (RFC 5546): an answer to an invitation, a
# proposal of another time, a request for the latest version. Clicked, not written: a
# mail carrying one is automatic (recorded, not answered).
ANSWER_METHODS = ("REPLY", "COUNTER", "DECLINECOUNTER", "REFRESH")
_ANSWER_KINDS = ("Calendar reply", "Calendar counter-proposal")
# An invitation is a few KB; a calendar export of years is not read whole.
_MAX_READ = 256 * 1024
_MAX_NOTES = 1000
_DATE_TIME = re.compile(r"^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})\d{2}(Z?))?$")


def _unfolded(text: str) -> list[str]:
    """The content lines: a line starting with a space or tab continues the one above."""
    lines: list[str] = []
    for line in text[:_MAX_READ].replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += line[1:]
        elif line:
            lines.append(line)
    return lines


def _split(line: str) -> tuple[str, dict[str, str], str]:
    """``NAME;PARAM=x;CN="A: B":value`` as (NAME, params, value): the value starts at
    the first colon outside quotes."""
    quoted = False
    for at, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == ":" and not quoted:
            head, value = line[:at], line[at + 1 :]
            break
    else:
        return line.upper(), {}, ""
    name, *params = head.split(";")
    found = {}
    for param in params:
        key, _, val = param.partition("=")
        found[key.strip().upper()] = val.strip().strip('"')
    return name.strip().upper(), found, value


def _text(value: str) -> str:
    """An iCalendar TEXT value unescaped (``\\n``, ``\\,``, ``\\;``, ``\\\\``), without
    control characters."""
    out = re.sub(r"\\([nN,;\\])", lambda m: "\n" if m.group(1) in "nN" else m.group(1), value)
    return "".join(c for c in out if c.isprintable() or c == "\n").strip()


def _when(value: str, params: dict[str, str]) -> tuple[str, str] | None:
    """(date, time) of a DATE or DATE-TIME value, the time with its zone ("" for a whole
    day); None when it is none."""
    found = _DATE_TIME.match(value.strip())
    if found is None:
        return None
    year, month, day, hour, minute, utc = found.groups()
    date = f"{year}-{month}-{day}"
    if hour is None:
        return date, ""
    zone = "UTC" if utc else params.get("TZID", "")
    return date, f"{hour}:{minute}" + (f" ({_text(zone)})" if zone else "")


def _span(start: tuple[str, str] | None, end: tuple[str, str] | None) -> str:
    if start is None:
        return ""
    if end is None or end == start:
        return " ".join(p for p in start if p)
    if not start[1]:  # whole days: DTEND is the day after the last one
        return start[0] if end[0] <= start[0] else f"{start[0]} to {end[0]} (end excluded)"
    if end[0] == start[0]:
        return f"{start[0]} {start[1].split(' ')[0]}-{end[1]}"
    return f"{start[0]} {start[1]} to {end[0]} {end[1]}"


def _person(value: str, params: dict[str, str]) -> str:
    address = re.sub(r"(?i)^mailto:", "", value.strip())
    name = _text(params.get("CN", ""))
    return f"{name} <{address}>" if name and address else name or address


def calendar_text(text: str, method: str | None = None) -> str | None:
    """The first event of the calendar ``text`` as lines (what it is, summary, when,
    where, who organises it, who answered, the notes); None when it has no event.
    ``method`` is the one of the MIME part (``text/calendar; method=REQUEST``), used
    when the calendar names none."""
    props: list[tuple[str, dict[str, str], str]] = []
    in_event = False
    for line in _unfolded(text):
        name, params, value = _split(line)
        if name == "METHOD" and not method:
            method = value.strip()
        elif name == "BEGIN" and value.strip().upper() == "VEVENT":
            in_event = True
        elif name == "END" and value.strip().upper() == "VEVENT":
            break
        elif in_event:
            props.append((name, params, value))
    if not in_event:
        return None
    first = {name: (params, value) for name, params, value in reversed(props)}

    def when(key: str) -> tuple[str, str] | None:
        return _when(first[key][1], first[key][0]) if key in first else None

    kind = _KINDS.get((method or "").strip().upper(), "Calendar event")
    summary = _text(first["SUMMARY"][1]) if "SUMMARY" in first else ""
    lines = [f"{kind}: {summary or '(no title)'}"]
    if first.get("STATUS", ({}, ""))[1].strip().upper() == "CANCELLED" and "cancel" not in kind:
        lines[0] += " (cancelled)"
    if span := _span(when("DTSTART"), when("DTEND")):
        lines.append(f"When: {span}")
    if "LOCATION" in first and (where := _text(first["LOCATION"][1])):
        lines.append(f"Where: {where}")
    if "ORGANIZER" in first:
        lines.append(f"Organizer: {_person(first['ORGANIZER'][1], first['ORGANIZER'][0])}")
    answers = [
        f"{_person(value, params)}: {params['PARTSTAT'].lower()}"
        for name, params, value in props
        if name == "ATTENDEE" and "PARTSTAT" in params and kind in _ANSWER_KINDS
    ]
    if answers:
        lines.append("Answer: " + "; ".join(answers))
    if "COMMENT" in first and (comment := _text(first["COMMENT"][1])):
        lines.append(f"Comment: {comment}")  # what the attendee typed with the answer
    if "DESCRIPTION" in first and (notes := _text(first["DESCRIPTION"][1])):
        lines += ["", notes if len(notes) <= _MAX_NOTES else notes[: _MAX_NOTES - 1] + "…"]
    return "\n".join(lines)


def _method(part: Message) -> str:
    """The METHOD of a calendar part: its MIME parameter, else the calendar's own."""
    method = part.get_param("method")
    if isinstance(method, str) and method.strip():
        return method.strip().upper()
    for line in _unfolded(part_text(part)):
        name, _, value = _split(line)
        if name == "METHOD":
            return value.strip().upper()
        if name == "BEGIN" and value.strip().upper() == "VEVENT":
            break
    return ""


def calendar_answer(msg: Message) -> str | None:
    """What the calendar answer ``msg`` carries says (``Calendar reply: Dentist``, its
    time, ``Answer: Ann <ann@example.net>: accepted``, a comment typed with it), or None
    when it carries none. Outlook sends it as ``text/calendar; method=REPLY`` beside a
    text part that is empty or holds the comment, Google beside "Ann has accepted this
    invitation." and an ``invite.ics`` file; a calendar inside an attached mail is a
    forwarded one, not this mail's."""
    for part in own_parts(msg):
        # (an .ics file, application/ics, is a file someone attached: Google sends one
        # beside the text/calendar part, which says it all)
        if content_type(part) == "text/calendar" and not part.is_multipart():
            method = _method(part)
            if method in ANSWER_METHODS:
                return calendar_text(part_text(part), method) or f"{_KINDS.get(method, method)}."
    return None
