"""A state.db made anew next to stored conversations: the replies whose delivery cannot
be known are named to the owner, once, and in ``my-agent status``.

A reply is written to its transcript, then sent from the outbox in ``state.db``. When
``state.db`` is missing next to stored conversations (a restore of the transcripts
without it, or one moved aside as the error for a damaged one advises), a new one is
made and what the old one held is gone: a reply still waiting in its outbox (its channel
failing at the time of the backup) is never sent, and the transcripts do not say which
replies went out. Before session 40 the only word of it was an ERROR line in the log,
and ``my-agent status`` said "outbox: 0 pending".

The open that makes the new file records when (:func:`mark_new`: ``channel_cursors`` row
``state`` / ``made_new``, whoever opened it, a command too). Once its channels are up,
the daemon names the conversations whose last turn is a reply written in the day before
the newest conversation stored then (:data:`WINDOW_SECONDS`: older replies went out, or
the owner would have asked again), and tells the owner of them
(:func:`tell_unknown_deliveries`), the row claimed first so that it is told once.
``my-agent status`` shows the row for a week (:func:`made_new_report`).

Each open that writes also records, once, when this ``state.db`` was first opened
(:func:`mark_born`: row ``state`` / ``born``): made new, or opened by a version that knew
no such row (an upgrade). While its outbox is empty, a reply written since that moment
without a row can only be one a crash cut from its row (:mod:`bot.resume`).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.db import SyncConn
from bot.events import iso, utcnow
from bot.moments import require_moment

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.db")

CURSOR = ("state", "made_new")  # (channel, key) of the row in channel_cursors
BORN = ("state", "born")  # (channel, key) of the row :func:`mark_born` writes
# How far before the newest stored conversation a last reply is taken as maybe unsent
WINDOW_SECONDS = 24 * 3600.0
LISTED = 10  # conversations named in the alert; the others are counted
QUOTED = 80  # characters of the owner's message quoted for each
SHOWN_DAYS = 7  # how long `my-agent status` shows it


def mark_new(conn: SyncConn) -> None:
    """Record, in the state.db just made (``conn``), that it was made next to stored
    conversations, and when."""
    now = iso(utcnow())
    conn.execute(
        "INSERT OR IGNORE INTO channel_cursors (channel, key, value, updated) VALUES (?, ?, ?, ?)",
        (*CURSOR, json.dumps({"at": now}), now),
    )


def mark_born(conn: SyncConn) -> None:
    """Record in ``conn`` (state.db, opened to write) when it was first opened so; a
    later open leaves the row as it is."""
    now = iso(utcnow())
    conn.execute(
        "INSERT OR IGNORE INTO channel_cursors (channel, key, value, updated) VALUES (?, ?, ?, ?)",
        (*BORN, json.dumps({"at": now}), now),
    )


def born_at(conn: SyncConn) -> str | None:
    """When :func:`mark_born` first recorded ``conn`` (state.db) opened, as an ISO stamp;
    None when it never did, or the row cannot be read."""
    row = conn.execute(
        "SELECT value FROM channel_cursors WHERE channel = ? AND key = ?", BORN
    ).fetchone()
    if row is None:
        return None
    try:
        return iso(require_moment(json.loads(row[0])["at"]))
    except (ValueError, KeyError, TypeError):
        return None


def unknown_deliveries(conn: SyncConn, at: str) -> list[dict[str, str]]:
    """The conversations of the index (``conn``) whose last turn stored before ``at`` is
    a reply written in the :data:`WINDOW_SECONDS` before the newest of them, newest first:
    id, channel, title, the owner's message it answers and when it was written."""
    row = conn.execute("SELECT max(updated) FROM conversations WHERE updated <= ?", (at,))
    newest = row.fetchone()[0]
    if newest is None:
        return []
    since = iso(require_moment(str(newest)) - timedelta(seconds=WINDOW_SECONDS))
    rows = conn.execute(
        """
        SELECT c.id, c.channel, coalesce(c.title, ''), t.timestamp,
            (SELECT u.content FROM turns u WHERE u.conversation_id = c.id
                AND u.turn_number = t.turn_number AND u.role = 'user'
                ORDER BY u.id DESC LIMIT 1)
        FROM conversations c
        JOIN turns t ON t.id = (SELECT max(l.id) FROM turns l
            WHERE l.conversation_id = c.id AND l.timestamp <= ?)
        WHERE c.updated >= ? AND t.role = 'assistant' AND t.timestamp >= ?
        ORDER BY t.timestamp DESC
        """,
        (at, since, since),
    ).fetchall()
    return [
        {"id": cid, "channel": channel, "title": title, "asked": asked or "", "replied": when}
        for cid, channel, title, when, asked in rows
    ]


async def tell_unknown_deliveries(services: Services) -> None:
    """At the daemon's start, once its channels are up: when state.db was made anew
    next to stored conversations and the owner was not told yet, claim the notice and
    tell them which conversations' last reply may not have gone out. A failure is
    logged: it must not stop the start."""
    try:
        found = await services.state.fetchone(
            "SELECT value FROM channel_cursors WHERE channel = ? AND key = ?", CURSOR
        )
        if found is None:
            return
        old = str(found[0])
        data = json.loads(old)
        if data.get("told"):
            return
        named = await services.index_db.run(
            lambda conn: unknown_deliveries(conn, str(data["at"])), write=False
        )
        data.update(told=iso(utcnow()), count=len(named), conversations=named[:LISTED])
        if not await services.state.run(lambda conn: _claim(conn, old, json.dumps(data))):
            return  # told by another start meanwhile
    except Exception as exc:
        log.warning("cannot tell which replies a new state.db may have lost: %s", exc)
        return
    if named:
        await services.alert_owner(alert_text(data))


def _claim(conn: SyncConn, old: str, new: str) -> bool:
    cur = conn.execute(
        "UPDATE channel_cursors SET value = ?, updated = ? WHERE channel = ? AND key = ?"
        " AND value = ?",
        (new, iso(utcnow()), *CURSOR, old),
    )
    return bool(cur.rowcount)


def _named(conversation: dict[str, str]) -> str:
    # the owner's own words first: what they recognise (an id says nothing on a phone)
    asked = " ".join(conversation["asked"].split())
    if len(asked) > QUOTED:
        asked = asked[: QUOTED - 1] + "…"
    title = f' "{conversation["title"]}"' if conversation["title"] else ""
    return (
        f"the reply to “{asked}” ({conversation['channel']}{title}, {conversation['id']}, "
        f"written {_minute(conversation['replied'])})"
    )


def alert_text(data: dict[str, Any]) -> str:
    """The owner's alert for the claimed row ``data``."""
    listed = [_named(c) for c in data.get("conversations", [])]
    more = int(data.get("count", len(listed))) - len(listed)
    if more > 0:
        listed.append(f"and the last reply of {more} more conversation(s) (my-agent status)")
    return (
        "Replies that may not have reached you: "
        + "; ".join(listed)
        + ". state.db was missing and a new one was made (a restore without it?): replies "
        "still waiting in its outbox are lost, and which replies went out cannot be "
        "known. Ask again if no answer came."
    )


def made_new_report(conn: Any, now: datetime | None = None) -> dict[str, Any] | None:
    """For ``my-agent status`` (``conn``: state.db, read-only): the row when state.db was
    made anew in the last :data:`SHOWN_DAYS` days (or the owner has not been told yet),
    else None."""
    row = conn.execute(
        "SELECT value FROM channel_cursors WHERE channel = ? AND key = ?", CURSOR
    ).fetchone()
    if row is None:
        return None
    try:
        data: dict[str, Any] = json.loads(row[0])
        made = require_moment(data["at"])
    except (ValueError, KeyError, TypeError):
        return None
    if data.get("told") and (now or utcnow()) - made > timedelta(days=SHOWN_DAYS):
        return None
    return data


def made_new_text(data: dict[str, Any]) -> str:
    """``my-agent status``'s line for :func:`made_new_report`'s ``data``."""
    head = f"made new {_minute(data['at'])} next to stored conversations (the old outbox is lost)"
    if not data.get("told"):
        return (
            f"{head}: at its next start the daemon tells the owner which conversations' last "
            "reply may not have been sent"
        )
    count = int(data.get("count", 0))
    if not count:
        return f"{head}: no recent reply was at risk"
    listed = data.get("conversations", [])
    ids = ", ".join(c["id"] for c in listed)
    more = f" and {count - len(listed)} more" if count > len(listed) else ""
    return (
        f"{head}: the last reply of {count} conversation(s) may not have been sent ({ids}"
        f"{more}); the owner was told {_minute(data['told'])}"
    )


def _minute(stamp: str) -> str:
    return f"{str(stamp)[:16].replace('T', ' ')} UTC"


def read_made_new(state_path: Path, connect: Any) -> dict[str, Any] | None:
    """:func:`made_new_report` of the state.db at ``state_path`` (``connect``: the
    read-only connector of ``my-agent status``)."""
    conn = connect(state_path)
    try:
        return made_new_report(conn)
    finally:
        conn.close()
