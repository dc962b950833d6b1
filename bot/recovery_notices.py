"""Telling the owner, once, of what recovery saved from the index.

Recovery writes what the index held of a deleted transcript or party record to a
``removed/`` directory (:mod:`bot.transcript_rescue`, :mod:`bot.party_rescue`). The
daemon told the owner of the copies its own start made; a one-shot command's recovery
(``my-agent search``, ``conversations``, run while the daemon is stopped) made the
same copies and only logged them on its stderr, so the owner who was not at that shell
was never told (before session 28). The copies on disk are now the record of what is
owed: once the channels are up, the daemon tells the owner of every copy it has not
told of yet, whoever made it, and claims each in ``state.db``'s ``owner_notices``
(:func:`bot.owner_notices.notice_due`, by file name and time, so a copy made again later
is news again). A copy moved back or deleted before the start is not mentioned.
The turns a transcript that shrank no longer holds (``<conv-id>.shrunk.jsonl``, session
39) are told of the same way, in an alert of their own.
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

from bot.owner_notices import notice_due
from bot.parties import INDEX_MESSAGE_CHARS
from bot.party_rescue import cut_messages, message_count
from bot.transcript_lines import Line, parse_lines
from bot.transcript_rescue import REMOVED_DIR, is_shrunk_copy, original_name

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.recovery")

# The copies listed in one alert; the others are counted (a thousand deleted files must
# not make an alert of pages)
LISTED = 10


def transcript_notice(name: str, copy: Path, turns: int) -> str:
    """The owner's line for a transcript found missing (``name``) and saved as ``copy``."""
    return (
        f"{name} was missing (deleted?): its conversation is out of search and history;"
        f" the {_n(turns, 'turn')} the index held are saved as {copy} (move it back into"
        f" {copy.parent.parent} as {name} and restart to restore it, or delete it to forget it)"
    )


def shrunk_notice(name: str, copy: Path, turns: int) -> str:
    """The owner's line for a transcript found shorter than the index (``name``), the
    turns it no longer holds saved as ``copy``."""
    return (
        f"{name} shrank (an older copy put back? cut by a repair?): the {_n(turns, 'turn')}"
        f" it no longer holds, which the index held, are out of search and history and"
        f" saved as {copy} (to restore them, stop my-agent and put the copy's turn lines"
        f" back into {copy.parent.parent / name} where they were; or delete it to forget them)"
    )


def party_notice(name: str, copy: Path, lines: list[Line]) -> str:
    """The owner's line for a party record found missing, saved as ``copy`` (``lines``)."""
    meta = next((line for line in lines if line.get("type") == "meta"), {})
    who = meta.get("name") or meta.get("party") or "?"
    messages = message_count(lines)
    if (copy.parent.parent / name).exists():
        # they wrote again since: a new record under the same id, which a move would replace
        restore = f"they have written since, and {name} is their new record: keep the copy"
    else:
        restore = (
            f"move it back into {copy.parent.parent} as {name} and restart to restore them,"
            " or delete it to forget them"
        )
    text = (
        f"{name} ({who}, {meta.get('channel') or '?'}) was missing (deleted?): the party is"
        f" out of the list and their trust tier forgotten; the {_n(messages, 'message')} the"
        f" index held are saved as {copy} ({restore}). Not recovered: subjects, attachments"
    )
    cut = cut_messages(lines)
    if cut:
        text += f", and the end of {cut} message(s) the index kept cut to {INDEX_MESSAGE_CHARS}"
        text += " characters"
    return text


def copy_line(path: Path, party: bool) -> str:
    """What the owner is told of the copy at ``path`` (``party``: a party record's); a
    copy that cannot be read is named all the same."""
    name = original_name(path)
    try:
        lines = parse_lines(path.read_bytes(), path.name)
    except OSError as exc:
        return f"{name} was missing: saved as {path} ({exc})"
    if party:
        return party_notice(name, path, lines)
    turns = sum(1 for line in lines if line.get("type") == "turn")
    if is_shrunk_copy(path):
        return shrunk_notice(name, path, turns)
    return transcript_notice(name, path, turns)


def saved_copies(directory: Path) -> list[tuple[Path, str]]:
    """The copies in ``directory``/removed with their notice keys: the path and the time
    each was written (written again later, it is news again)."""
    found = []
    for path in sorted((directory / REMOVED_DIR).glob("*.jsonl")):
        try:
            written = path.stat().st_mtime_ns
        except OSError:  # gone meanwhile (moved back)
            continue
        found.append((path, f"removed:{directory.name}/{path.name}:{written}"))
    return found


async def tell_saved_copies(services: Services) -> None:
    """Tell the owner of every copy in the ``removed/`` directories not told of yet (one
    alert for missing transcripts, one for shrunk ones, one for party records); each is
    claimed before it goes (:func:`bot.owner_notices.notice_due`), so it is told once
    across restarts. Only the copies not told of yet are read (a start is not slowed by
    old ones)."""
    config = services.config
    for directory, party, shrunk, heading in (
        (config.conversations_dir, False, False, "Transcripts missing at start: "),
        (config.conversations_dir, False, True, "Transcripts that lost turns at start: "),
        (config.external_dir, True, False, "Party records missing at start: "),
    ):
        copies = await asyncio.to_thread(saved_copies, directory)
        untold = [
            path
            for path, key in copies
            if is_shrunk_copy(path) == shrunk and await _due(services, key)
        ]
        if not untold:
            continue
        lines = [await asyncio.to_thread(copy_line, path, party) for path in untold[:LISTED]]
        if len(untold) > LISTED:
            lines.append(f"and {len(untold) - LISTED} more in {directory / REMOVED_DIR}")
        await services.alert_owner(heading + "; ".join(lines))


async def _due(services: Services, key: str) -> bool:
    """Whether the copy's notice is still owed (claimed now). A ``state.db`` that refuses
    the claim (a full disk) must not stop the start: told then, maybe again next time."""
    try:
        return await notice_due(services.state, key, math.inf)
    except Exception as exc:
        log.warning("cannot record that the owner is told of %s: %s", key, exc)
        return True


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
