"""What the index held of a transcript deleted while the daemon was stopped.

The transcripts are the truth and the index is derived from them, so a conversation
whose transcript is gone at start is taken out of the index (it was deleted to forget
it). Until session 27 that was all, and silent: a transcript lost by mistake (a sync
tool, a restore that missed a file, a wrong ``rm``) took its turns with it, though the
index still held their text. Start-up (:mod:`bot.recovery`) now first writes what the
index holds of it as a transcript of its own, ``removed/<conv-id>.jsonl`` under the
conversations directory (its meta line, then its turns in order), and the owner is told
the file's name once the channels are up: moved back into the conversations directory,
it is the conversation again at the next start (recovery registers it); deleted, it is
forgotten. The copy holds what the index keeps (text, roles, times, channel, sender),
not every field of the original lines (usage, attachments' metadata).

A transcript that *shrank* while the daemon was stopped (an older copy put back by a sync
tool or a backup, a cut by a file-system repair, a 0-byte file) is indexed again from
what it holds. Until session 39 its rows were simply deleted first, and the turns the
file had lost went with them, silently, though the index held their text. Recovery now
first writes the index's turns the file no longer holds (with the meta line) to
``removed/<conv-id>.shrunk.jsonl`` (:func:`save_lost_turns`), and the owner is told;
the file is given a line that keeps the lost turns' numbers taken (:func:`numbering_line`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bot.db import SyncConn
from bot.durable_files import replace_durably
from bot.index import SELECT_CONVERSATION, row_to_record
from bot.index_writes import TURNS_LOST, meta_from_record
from bot.transcript_lines import Line, event_line, turn_line

REMOVED_DIR = "removed"
# The second part of the name of a copy of the turns a shrunk transcript lost
SHRUNK = "shrunk"


def removed_copy_path(conversations_dir: Path, conv_id: str) -> Path:
    """Where the index's copy of ``conv_id``'s deleted transcript is written."""
    return conversations_dir / REMOVED_DIR / f"{conv_id}.jsonl"


def index_lines(conn: SyncConn, conv_id: str) -> list[Line]:
    """The transcript lines the index can give back for ``conv_id`` (meta first; no
    line when the index holds no record of it)."""
    row = conn.execute(f"{SELECT_CONVERSATION} WHERE id = ?", (conv_id,)).fetchone()
    if row is None:
        return []
    lines: list[Line] = [meta_from_record(row_to_record(row))]
    turns = conn.execute(
        "SELECT turn_number, role, content, timestamp, channel, sender, awaits_reply, recall"
        " FROM turns WHERE conversation_id = ? ORDER BY id",
        (conv_id,),
    )
    for number, role, content, ts, channel, sender, awaits, recall in turns:
        line = turn_line(role, content, number, timestamp=ts, channel=channel, sender=sender)
        if role == "user" and not awaits:
            line["awaitReply"] = False
        if role == "assistant" and not recall:
            line["model"] = "offline"  # a readout: kept out of search, as it was
        lines.append(line)
    return lines


def save_removed_copy(conn: SyncConn, conversations_dir: Path, conv_id: str) -> tuple[Path, int]:
    """Write what the index holds of ``conv_id`` to :func:`removed_copy_path`, durably
    (:func:`write_copy`); returns the path and the turns written. Raises
    :class:`OSError` when it cannot be written (the caller keeps the rows)."""
    lines = index_lines(conn, conv_id)
    path = free_copy_path(removed_copy_path(conversations_dir, conv_id))
    write_copy(path, lines)
    return path, max(0, len(lines) - 1)


def lost_turns(conn: SyncConn, conv_id: str, lines: list[Line]) -> list[Line]:
    """The index's meta line of ``conv_id`` and its turns that ``lines`` (what the
    transcript holds now) no longer hold, in order; ``[]`` when none is lost. A turn is
    known by its number and role (a cut between a message and its reply loses the
    reply only); a number and role held twice by the index and once by the file loses
    the later row."""
    held = Counter(
        (line.get("turnNumber"), line.get("role")) for line in lines if line.get("type") == "turn"
    )
    index = index_lines(conn, conv_id)
    lost = []
    for line in index[1:]:
        key = (line["turnNumber"], line["role"])
        if held[key] > 0:
            held[key] -= 1
        else:
            lost.append(line)
    return index[:1] + lost if lost else []


def save_lost_turns(
    conn: SyncConn, conversations_dir: Path, conv_id: str, lines: list[Line]
) -> tuple[Path, int] | None:
    """Write :func:`lost_turns` of a transcript that shrank to
    ``removed/<conv-id>.shrunk.jsonl`` (``.shrunk.2.jsonl``... beside an earlier copy),
    durably; returns the path and the turns written, or ``None`` when the file lost no
    turn the index held. Raises :class:`OSError` when it cannot be written (the caller
    keeps the rows)."""
    lost = lost_turns(conn, conv_id, lines)
    if not lost:
        return None
    path = free_copy_path(conversations_dir / REMOVED_DIR / f"{conv_id}.{SHRUNK}.jsonl")
    write_copy(path, lost)
    return path, len(lost) - 1


def numbering_line(lines: list[Line], through: int) -> Line | None:
    """The event to append to a transcript that shrank (``lines``: what it holds now)
    whose turns the index numbered up to ``through``: a ``turns_lost`` line carrying that
    number, so that the next message is numbered past the lost ones, also in an index
    rebuilt from the files later. ``None`` when the file's own numbers (or such a line
    of its own) reach that far.

    The lost replies' outbox rows keep their keys (``<conv>:<turn>:reply``): before
    session 40 the owner's next messages took the lost turns' numbers again, and their
    replies, written to the transcript, were dropped as queued before, never sent."""
    held = 0
    for line in lines:
        kind = line.get("type")
        if kind == "turn":
            number = line.get("turnNumber")
        elif kind == "event" and line.get("event") == TURNS_LOST:
            number = line.get("throughTurn")
        else:
            continue
        if isinstance(number, int):
            held = max(held, number)
    return event_line(TURNS_LOST, throughTurn=through) if through > held else None


def is_shrunk_copy(copy: Path) -> bool:
    """Whether ``copy`` holds the turns a shrunk transcript lost (:func:`save_lost_turns`),
    not a whole transcript that went missing."""
    return copy.name.split(".")[1:2] == [SHRUNK]


def free_copy_path(path: Path) -> Path:
    """``path``, or the first free ``<id>.N.jsonl`` beside it when a copy is there
    already: an earlier copy is never overwritten (a party saved once writes again, a
    new record is made under the same id, and that one is deleted too)."""
    candidate, number = path, 2
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{number}{path.suffix}")
        number += 1
    return candidate


def original_name(copy: Path) -> str:
    """The file name a copy stands for (``p1234567.jsonl`` for ``p1234567.2.jsonl``)."""
    return f"{copy.name.split('.')[0]}.jsonl"


def write_copy(path: Path, lines: list[Line]) -> None:
    """Write ``lines`` as JSONL to ``path`` durably: a temporary file synced, renamed,
    the directory synced (created 0700 when missing). The copy is all that is left of
    what it holds, so it must be on the disk before the rows it came from are deleted."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    replace_durably(path, data.encode("utf-8"))  # 0600, as every transcript
