"""A third party's file and its mirror in the index: the append that must not be lost.

Each party's messages and events are appended to ``data_dir/external/{party_id}.jsonl``
(durable, through the same journal as the transcripts, :mod:`bot.journal`), then
mirrored into the ``external_*`` tables (:mod:`bot.parties`). A mirror the index refuses
is owed and made before the party's next write. What is appended, and when:
:class:`bot.external.ExternalStore`, built on this.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from bot.config import AppConfig
from bot.db import Database, SyncConn
from bot.events import InboundMessage
from bot.parties import PartyRecord, apply_party_lines
from bot.party_lines import answered_message
from bot.party_reads import PartyReads
from bot.record_cache import RecordCache
from bot.transcript import TranscriptStore
from bot.transcript_lines import Line, encode, parse_lines

log = logging.getLogger("my_agent.external")


class PartyFiles(PartyReads):
    """The parties' files under ``config.external_dir``: appended and mirrored here, read
    back (a party's lines, the thread of their last message); the index's reads of them
    are :class:`~bot.party_reads.PartyReads`, the base."""

    def __init__(self, config: AppConfig, db: Database) -> None:
        self.config = config
        self.db = db
        self.directory = config.external_dir
        self._files = TranscriptStore(self.directory, fsync=config.transcripts.fsync == "always")
        # party id -> the batches whose file append succeeded and index write failed,
        # mirrored before anything else is written for the party (_apply_owed)
        self._owed: dict[str, list[tuple[list[Line], int]]] = {}
        # (party id, message ref) recorded by a call that then failed: its flow never ran
        self._unhandled: set[tuple[str, str]] = set()
        self._owed_lock = asyncio.Lock()
        # Records read for a group member's message (:meth:`current`), each with the
        # count of index writes it was read after: any party's write makes them all
        # stale. A read per member's message was a hop to the reader thread that, at
        # 2,000 messages a second, tripled the open-loop p99 (docs/benchmarks.md
        # "ingest", session 33); in a group, parties' records seldom change.
        self._mirrored = 0
        self._current: RecordCache[tuple[int, PartyRecord | None]] = RecordCache()

    def open(self, exclusive: bool = False, shared: bool = False) -> int:
        """Replay the party files' journal after a crash (see :mod:`bot.journal`).

        ``exclusive`` (the daemon): :class:`BlockingIOError` when another process holds
        it. ``shared`` (a command next to a running daemon, whose transcript journal is
        held): the journal is left to the daemon, neither locked nor replayed. Taking it
        because the daemon had not opened it yet (it opens the transcripts' first) made
        the daemon run with party files outside any journal."""
        if shared:
            return self._files.open_shared()
        return self._files.open(exclusive=exclusive)

    def close(self) -> None:
        self._files.close()

    def _path(self, party_id: str) -> Path:
        return self.directory / f"{party_id}.jsonl"

    async def _record(self, party_id: str, lines: list[Line]) -> list[int]:
        """Append to the party's file (durable), then mirror into the tables together with
        how far the file is indexed, so recovery does not replay these lines again.

        A mirror that fails (a full disk: SQLite's, not the file's) is owed: made before
        the party's next write, which is refused while it still fails. Before, the
        message's redelivery found no trace of it in the tables and appended it to the
        file a second time."""
        await self._apply_owed(party_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(party_id)
        size = await self._files.append_file(path, encode(lines))
        try:
            result = await self._mirror_now(party_id, lines, size)
        except Exception:
            self._owed.setdefault(party_id, []).append((lines, size))
            self._unhandled.update(
                (party_id, str(line["messageRef"]))
                for line in lines
                if line.get("direction") == "in" and line.get("messageRef")
            )
            raise
        return result

    async def _mirror_now(self, party_id: str, lines: list[Line], size: int) -> list[int]:
        """:meth:`_mirror` on the writer; whether it wrote or failed, the records
        :meth:`current` read before are stale from then on (counted once the write is
        over: a read made meanwhile may have seen the row before it)."""
        try:
            created: list[int] = await self.db.run(self._mirror(party_id, lines, size))
        finally:
            self._mirrored += 1
        return created

    async def current(self, party_id: str) -> PartyRecord | None:
        """:meth:`~bot.party_reads.PartyReads.get`, from memory while no party's record
        was written since it was read (the router's check of a group member's tier, at
        every message they send)."""
        mirrored = self._mirrored
        known = self._current.get(party_id)
        if known is not None and known[0] == mirrored:
            return known[1]
        record = await self.get(party_id)
        self._current[party_id] = (mirrored, record)
        return record

    def _mirror(self, party_id: str, lines: list[Line], size: int) -> Any:
        def _apply(conn: SyncConn) -> list[int]:
            created = apply_party_lines(conn, party_id, lines, self.config)
            conn.execute(
                "INSERT INTO index_meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                "SET value = excluded.value "
                "WHERE CAST(excluded.value AS INTEGER) > CAST(index_meta.value AS INTEGER)",
                (f"ext:{party_id}", str(size)),
            )
            return created

        return _apply

    async def _apply_owed(self, party_id: str) -> None:
        """Mirror the party's batches whose index write failed, oldest first; raises
        (nothing more appended) while the index still refuses them."""
        if not self._owed.get(party_id):
            return
        async with self._owed_lock:  # two writers must not mirror the same batch twice
            owed = self._owed.get(party_id)
            while owed:
                lines, size = owed[0]
                await self._mirror_now(party_id, lines, size)
                owed.pop(0)
                log.info("party %s: a record the index refused is mirrored now", party_id)
            self._owed.pop(party_id, None)

    def take_unhandled(self, party_id: str, message_ref: str) -> bool:
        """Whether the party's message ``message_ref`` was recorded by a call that then
        failed (its flow is still to run); forgotten once asked."""
        unhandled = (party_id, message_ref) in self._unhandled
        self._unhandled.discard((party_id, message_ref))
        return unhandled

    # -- reading the party's file ----------------------------------------------------
    async def read_lines(self, party_id: str) -> list[Line]:
        """The party's file, line by line (empty if it has none)."""

        def _read() -> list[Line]:
            try:
                return parse_lines(self._path(party_id).read_bytes())
            except FileNotFoundError:
                return []

        return await asyncio.to_thread(_read)

    async def reply_thread(self, party: PartyRecord) -> InboundMessage | None:
        """The party's last message, as it came (:func:`bot.party_lines.answered_message`):
        where an answer that is not a direct reply (the owner's ``/reply``, an answer to
        a command) goes in their thread, and to whom; None when they sent none. Read from
        the party's file (the tables keep no threading); a rare, owner-driven read."""

        def _last() -> InboundMessage | None:
            try:
                lines = parse_lines(self._path(party.id).read_bytes())
            except OSError:
                return None
            for line in reversed(lines):
                if line.get("type") == "message" and line.get("direction") == "in":
                    return answered_message(party, line)
            return None

        return await asyncio.to_thread(_last)
