"""The lines of a transcript (seed 000 "Transcript (JSONL)"): how each kind is made,
encoded, parsed and checked.

A transcript is a ``meta`` line, then ``turn`` and ``event`` lines, one JSON object a
line. Parsing is tolerant: a corrupt line, or valid JSON of the wrong shape, is skipped
with a warning (:func:`parse_lines`). The files themselves: :mod:`bot.transcript`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ulid import ULID

from bot.events import iso, utcnow

log = logging.getLogger("my_agent.transcript")

Line = dict[str, Any]


# Assistant turns written by these "models" are mechanical readouts, not conversation:
# the offline brain's labelled notice and recall listing (which quotes snippets of
# *other* conversations) and the apology after a failure. They stay in the transcript and
# in ``turns`` (the record, the dashboard, the reply history) but are kept out of recall:
# indexed, the offline brain's next listing found its own earlier listing first (a quote
# of a quote), and the extractive notes and titles of an offline conversation were built
# from the label ("Set ANTHROPIC_API_KEY ...") and from other conversations' facts.
READOUT_MODELS = frozenset({"offline", "error"})


# The metadata key of a group's turn that records a member joining or leaving (its
# value "joined" or "left"), as a channel hands it over (channels/telegram/membership.py):
# never answered, kept for the rule of who reads what (bot/brain/restricted_window.py).
MEMBERSHIP = "membership"


def membership_notice(line: Mapping[str, Any]) -> bool:
    """Whether a turn ``line`` records a member joining or leaving a group
    (:data:`MEMBERSHIP`), not anything said."""
    metadata = line.get("metadata")
    return (
        line.get("role") == "user"
        and isinstance(metadata, Mapping)
        and metadata.get(MEMBERSHIP) in ("joined", "left")
    )


def recallable(line: Mapping[str, Any]) -> bool:
    """False for a turn line that is a mechanical readout (``READOUT_MODELS``) or a
    member's join or leave notice (:func:`membership_notice`): it is not searched,
    embedded, abbreviated or used for naming. A notice was found by search as if said
    (before session 31: "[joined the group]" matched "who joined?" in every group)."""
    if line.get("role") == "assistant":
        return line.get("model") not in READOUT_MODELS
    return not membership_notice(line)


def new_conversation_id() -> str:
    return f"conv-{ULID()}"


def meta_line(
    conv_id: str, channel: str, participants: Iterable[str], created: str | None = None
) -> Line:
    return {
        "type": "meta",
        "id": conv_id,
        "channel": channel,
        "created": created or iso(utcnow()),
        "participants": list(participants),
    }


def turn_line(
    role: str,
    content: str,
    turn_number: int,
    *,
    timestamp: str | None = None,
    channel: str | None = None,
    sender: str | None = None,
    **extra: Any,
) -> Line:
    """A ``turn`` line; optional seed fields (usage, cost, thinkingText, ...) via ``extra``."""
    line: Line = {
        "type": "turn",
        "role": role,
        "content": content,
        "timestamp": timestamp or iso(utcnow()),
        "turnNumber": turn_number,
    }
    if channel is not None:
        line["channel"] = channel
    if sender is not None:
        line["sender"] = sender
    line.update({k: v for k, v in extra.items() if v is not None})
    return line


def event_line(event: str, *, timestamp: str | None = None, **fields: Any) -> Line:
    line: Line = {"type": "event", "event": event}
    line.update({k: v for k, v in fields.items() if v is not None})
    line["timestamp"] = timestamp or iso(utcnow())
    return line


def encode(lines: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        for line in lines
    )


# The warnings for a line that reads skip; ``my-agent reindex`` collects them (the file
# and the line number are their first two arguments) to list them in its report.
CORRUPT_LINE = "%s:%d: corrupt transcript line skipped (%d bytes)"
UNTYPED_LINE = "%s:%d: transcript line without a type skipped"
MALFORMED_LINE = "%s:%d: malformed %s line skipped"
SKIPPED_LINE_WARNINGS = frozenset({CORRUPT_LINE, UNTYPED_LINE, MALFORMED_LINE})


def line_value(raw: bytes) -> tuple[Any, bool]:
    """The JSON value of one transcript line, and whether bytes that are not UTF-8 had to
    be replaced (U+FFFD) to read it. Raises :class:`ValueError` when it is not JSON.

    A flipped bit on disk or another program's write can leave a byte that is not UTF-8
    inside a line that is otherwise whole: before session 27 the whole line, an owner's
    message, was skipped for it (and left out of the index and the history)."""
    try:
        return json.loads(raw), False
    except UnicodeDecodeError:
        return json.loads(raw.decode("utf-8", errors="replace")), True


def parse_lines(data: bytes, source: str = "", start_line: int = 1) -> list[Line]:
    """Parse complete JSONL lines, skipping (and logging) anything that is not an object."""
    out: list[Line] = []
    for number, raw in enumerate(data.split(b"\n"), start=start_line):
        if not raw.strip():
            continue
        try:
            obj, replaced = line_value(raw)
        except ValueError:
            log.warning(CORRUPT_LINE, source, number, len(raw))
            continue
        if replaced:
            log.warning(
                "%s:%d: bytes that are not UTF-8 in a transcript line read as U+FFFD"
                " (the rest of the line kept)",
                source,
                number,
            )
        if not isinstance(obj, dict) or "type" not in obj:
            log.warning(UNTYPED_LINE, source, number)
            continue
        if not well_formed(obj):
            # Valid JSON of the wrong shape (a hand edit, another program): a turn without
            # its content was shown as "[None] ... None" or ended `conversations show`
            # in a KeyError. The index never took such a line either.
            log.warning(MALFORMED_LINE, source, number, str(obj["type"])[:20])
            continue
        out.append(obj)
    return out


def well_formed(line: Mapping[str, Any]) -> bool:
    """False for a ``turn`` line without a user or assistant role and text content, or
    with a turn number that is not an integer, and for an ``event`` line without its
    event name. (A turn without a number is kept: SPEC.md's channel example has none;
    the index, :func:`bot.index.apply_line`, does not take it.)"""
    kind = line.get("type")
    if kind == "turn":
        return (
            line.get("role") in ("user", "assistant")
            and isinstance(line.get("content"), str)
            and isinstance(line.get("turnNumber", 0), int)
        )
    if kind == "event":
        return isinstance(line.get("event"), str)
    return isinstance(kind, str)
