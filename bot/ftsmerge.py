"""FTS5 segment merges in the index writer's idle time, never inside a message's commit.

FTS5 keeps its index as b-tree segments: every commit that inserts rows adds a small
one, and by default (``automerge`` 4) the commit that finds enough segments on one level
merges them there and then. Under a stream of messages, one commit in a few thousand
paid for a merge of the whole level: 10-12 ms on the writer thread at about 12,000
indexed turns, which every message queued behind it waited out (the largest single
stall of ``bench ingest``'s open loop, docs/benchmarks.md "Session 11").

So the index turns ``automerge`` off (migration 6) and the writer thread merges when it
has nothing else to do: after a commit that wrote, :class:`bot.db.Database` runs
:func:`merge_slice` while no unit of work is waiting, each call a transaction of its own
that writes about :data:`SLICE_PAGES` pages, until FTS5 reports that no level holds
``usermerge`` (4) segments. A message that arrives meanwhile waits for one slice at
most. ``crisismerge`` (16 segments on a level: merged in one go) stays as FTS5's own
bound for a stream that never leaves the writer idle.
"""

from __future__ import annotations

from pathlib import Path

from bot.db import Database, Driver, SyncConn

# Pages written per slice (FTS5 pages of ~4 KB): about half a millisecond here.
SLICE_PAGES = 16


def merge_slice(conn: SyncConn) -> bool:
    """One bounded FTS5 merge step on ``turns_fts``; True when it did work (more may
    remain), False when no level needed merging."""
    before = conn.total_changes
    conn.execute("INSERT INTO turns_fts(turns_fts, rank) VALUES('merge', ?)", (SLICE_PAGES,))
    # FTS5's documented test: a difference of 2 or more means the merge wrote something.
    return conn.total_changes - before >= 2


async def open_index_database(
    path: Path, driver: Driver | None = None, read_only: bool = False
) -> Database:
    """``conversations.db``, migrated, with its FTS5 merges in the writer's idle time.

    Every opener of the index goes through here: migration 6 turns FTS5's own merges
    off, and a database opened without :func:`merge_slice` would only ever merge at
    ``crisismerge``."""
    from bot.schema import INDEX_MIGRATIONS

    # (read_only: a reading command on a full disk, which merges nothing)
    merges = None if read_only else merge_slice
    return await Database.open(
        path, INDEX_MIGRATIONS, driver=driver, idle_work=merges, read_only=read_only
    )
