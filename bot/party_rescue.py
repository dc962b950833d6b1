"""What the index held of a third party whose record file was deleted while the daemon
was stopped.

A party's record (``external/p*.jsonl``) is the truth and the ``external_*`` tables are
derived from it, so a party whose file is gone at start is taken out of the index
(deleted to forget them, :mod:`bot.recovery_parties`). Until session 28 that was all,
with a log line only: a record lost by mistake (a sync tool, a restore that missed a
file) took with it every message a contact sent, though the index still held them. As
for a deleted transcript (:mod:`bot.transcript_rescue`), what the index holds is first
written as a record file of its own, ``removed/<party-id>.jsonl`` under the parties'
directory, in the lines :func:`bot.parties.apply_party_lines` reads: moved back, it is
the party again at the next start (their tier, messages, escalations); deleted, it is
forgotten. The index keeps less than the file did: at most
:data:`bot.parties.INDEX_MESSAGE_CHARS` characters of a message (a longer one's end is
lost: ``cutChars`` says how much, :func:`cut_messages` counts them for the owner's
notice) and no subject, Reply-To or album.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.db import SyncConn
from bot.events import SENT_AT
from bot.parties import PARTY_COLUMNS, party_from_row
from bot.transcript_lines import Line
from bot.transcript_rescue import REMOVED_DIR, free_copy_path, write_copy

# What cut_text (bot.parties) adds to a message longer than the index keeps: taken off
# in the copy (its characters are not in any file any more, and a copy put back would be
# cut again, the mark counted as text), their number kept as ``cutChars``
CUT_MARK = re.compile(r"\n\[cut: (\d+) more characters in the party's file\]\Z")


def removed_party_path(external_dir: Path, party_id: str) -> Path:
    """Where the index's copy of ``party_id``'s deleted record is written."""
    return external_dir / REMOVED_DIR / f"{party_id}.jsonl"


def party_index_lines(conn: SyncConn, party_id: str) -> list[Line]:
    """The record lines the index can give back for ``party_id``: its ``meta`` line
    (channel, key, name, chat, tier and who set it, and what the model's answers to
    them cost: ``usage``, ``cost``), then its messages and escalation
    events in the order they happened; no line when the index holds no such party."""
    row = conn.execute(
        f"SELECT {PARTY_COLUMNS}, meta FROM external_parties WHERE id = ?", (party_id,)
    ).fetchone()
    if row is None:
        return []
    party = party_from_row(row[:-1])
    meta: Line = {
        "type": "meta",
        "id": party.id,
        "channel": party.channel,
        "party": party.party_key,
        "name": party.display_name,
        "chatId": party.chat_id,
        "tier": party.tier,
        "tierSource": party.tier_source,
        "created": party.created,
    }
    if party.tokens_in or party.tokens_out or party.cost_total:
        # what the model's answers to them cost, all told: put back, the sums are
        # whole again (the copy's messages carry none of it)
        meta["usage"] = {"input": party.tokens_in, "output": party.tokens_out}
        meta["cost"] = round(party.cost_total, 8)
    handles = _handles(row[-1])
    # (time, order, lines): messages and escalations merged by time, each kind in its
    # own order when times tie
    timed: list[tuple[str, int, list[Line]]] = []
    messages = conn.execute(
        "SELECT id, direction, content, timestamp, message_ref, kind,"
        f" {_later_columns(conn, 'sent_at', 'answers')} FROM external_messages"
        " WHERE party_id = ? ORDER BY id",
        (party_id,),
    )
    for number, direction, content, ts, ref, kind, sent_at, answers in messages:
        line: Line = {
            "type": "message",
            "direction": direction,
            "content": content,
            "messageRef": ref,
            "kind": kind,
            "timestamp": ts,
            # when it was written (session 42): put back, a late one is still labelled
            **({SENT_AT: sent_at} if sent_at else {}),
        }
        cut = CUT_MARK.search(content)
        if cut is not None:
            line["content"], line["cutChars"] = content[: cut.start()], int(cut.group(1))
        if handles and direction == "in":
            line["handles"], handles = handles, []
        lines = [line, *_answered(line, answers)]
        if number == party.context_reset_at:  # the owner's /new for this party came here
            lines.append({"type": "event", "event": "reset", "timestamp": ts})
        timed.append((ts, 0, lines))
    escalations = conn.execute(
        "SELECT created, text, status, resolution FROM escalations WHERE party_id = ? ORDER BY id",
        (party_id,),
    )
    for created, text, status, resolution in escalations:
        lines = [{"type": "event", "event": "escalation", "text": text, "timestamp": created}]
        if status == "resolved":
            resolved = {"type": "event", "event": "resolved", "resolution": resolution}
            lines.append({**resolved, "timestamp": created})
        timed.append((created, 1, lines))
    timed.sort(key=lambda item: (item[0], item[1]))  # stable: each kind keeps its order
    return [meta, *(line for _, _, lines in timed for line in lines)]


def _answered(line: Line, answers: str | None) -> list[Line]:
    """Gives the model's answer ``line`` back the message of theirs it ``answers`` (a
    restart reads it to know that message answered: bot.party_resume) and returns the
    lines to follow it: for an answer withdrawn unsent, its ``withdrawn`` event (the line
    is then of kind ``answer``, as it was before the event, which makes the row
    ``withdrawn`` again). Before session 42 the copy had neither: put back, a start
    with no outbox row for the answer answered the message again, and a withdrawn
    answer read as a message of kind ``withdrawn`` that named nothing. None from an
    index written before migration 18: the line stays as the index has it."""
    if not answers:
        return []
    line["answers"] = answers
    if line["kind"] != "withdrawn":
        return []
    line["kind"] = "answer"
    at = line["timestamp"]
    return [{"type": "event", "event": "withdrawn", "answers": answers, "at": at, "timestamp": at}]


def _later_columns(conn: SyncConn, *names: str) -> str:
    """``names``, columns of ``external_messages`` a later migration added, each NULL in
    an index written before it: ``my-agent reindex`` reads the index it replaces as it
    is, without migrating it (bot/recovery_reindex.py)."""
    have = {str(row[1]) for row in conn.execute("PRAGMA table_info(external_messages)")}
    return ", ".join(name if name in have else f"NULL AS {name}" for name in names)


def save_removed_party(
    conn: SyncConn, external_dir: Path, party_id: str
) -> tuple[Path, list[Line]]:
    """Write what the index holds of ``party_id`` to :func:`removed_party_path`, durably;
    returns the path and the lines written. Raises :class:`OSError` when it cannot be
    written (the caller keeps the rows)."""
    lines = party_index_lines(conn, party_id)
    path = free_copy_path(removed_party_path(external_dir, party_id))
    write_copy(path, lines)
    return path, lines


def message_count(lines: list[Line]) -> int:
    """The messages among a party record's ``lines``."""
    return sum(1 for line in lines if line.get("type") == "message")


def cut_messages(lines: list[Line]) -> int:
    """How many messages of a copy the index had kept cut (their end is lost)."""
    return sum(1 for line in lines if line.get("type") == "message" and line.get("cutChars"))


def _handles(meta: str | None) -> list[str]:
    try:
        value = json.loads(meta or "{}").get("handles")
    except (ValueError, AttributeError):
        return []
    return [h for h in value if isinstance(h, str)] if isinstance(value, list) else []
