"""Reading part of a transcript without reading all of it.

:meth:`bot.transcript.TranscriptStore.read_lines` parses the whole file: right for the
brain and recovery, which need every line, but a dashboard page of 50 turns out of
20,000 then cost time and memory in proportion to the conversation, on every page. A
:class:`LineReader` reads lines backward from a byte offset or forward from one, and
finds the line where a turn number begins by bisection over the user turns (their
numbers never decrease along a transcript; a reply can be written many turns after its
question), so a window costs the lines it holds plus a few probes.

Lines are parsed as :func:`bot.transcript_lines.parse_lines` does (a corrupt or
malformed line is skipped with a warning). A torn last line (no newline yet) is left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from bot.transcript_lines import Line, parse_lines

BLOCK = 64 * 1024  # bytes read at a time, at most
# Turn lines read back from where the bisection ends (see LineReader._back).
BACK_TURNS = 16
FIRST_READ = 4096  # the first read of a scan (lines are mostly short); doubled up to BLOCK


class LineReader:
    """Lines of one transcript file, read by byte offset (see the module docstring).

    ``end`` is fixed when the reader opens: lines appended meanwhile are not seen, so
    one window is read from one state of the file (transcripts are append-only).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO = open(path, "rb")
        try:
            self.end = self._complete_end(os.fstat(self._fh.fileno()).st_size)
        except BaseException:
            self._fh.close()
            raise

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> LineReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _read(self, offset: int, size: int) -> bytes:
        self._fh.seek(offset)
        return self._fh.read(size)

    def _complete_end(self, size: int) -> int:
        """The offset just past the last newline (a torn last line is not a line)."""
        pos = size
        while pos > 0:
            start = max(0, pos - BLOCK)
            i = self._read(start, pos - start).rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
        return 0

    def parse(self, raw: bytes) -> Line | None:
        """One raw line parsed, or None when it is corrupt or malformed (logged)."""
        lines = parse_lines(raw, self.path.name, 0)
        return lines[0] if lines else None

    def backward(self, end: int) -> Iterator[tuple[int, bytes]]:
        """``(start, raw line)`` of the lines that end at or before ``end``, newest first.

        ``end`` is the start of a line (or :attr:`end`)."""
        buf, pos = b"", end  # buf is the file's bytes [pos, cur)
        cur, size = end, min(FIRST_READ, BLOCK)
        while cur > 0:
            # The newline ending the line before the one that ends at cur.
            i = buf.rfind(b"\n", 0, len(buf) - 1)
            if i < 0 and pos > 0:
                chunks = [buf]  # joined once: a 1 MB line is not copied at every read
                while i < 0 and pos > 0:
                    step, size = min(size, pos), min(size * 2, BLOCK)
                    pos -= step
                    chunks.append(self._read(pos, step))
                    # The chunk now begins buf; the newline at cur - 1 ends this line.
                    i = chunks[-1].rfind(b"\n", 0, cur - 1 - pos)
                buf = b"".join(reversed(chunks))
            start = pos + i + 1 if i >= 0 else 0
            raw = buf[start - pos : cur - pos - 1]
            buf, cur = buf[: start - pos], start
            yield start, raw

    def forward(self, start: int) -> Iterator[tuple[int, int, bytes]]:
        """``(start, next start, raw line)`` of the lines from ``start`` (a line's start)
        up to :attr:`end`."""
        buf, base = b"", start  # buf is the file's bytes [base, base + len(buf))
        pos, size = start, min(FIRST_READ, BLOCK)
        while pos < self.end:
            i = buf.find(b"\n", pos - base)
            if i < 0:
                chunks, at = [buf], base + len(buf)  # joined once, as in backward()
                while i < 0:
                    if at >= self.end:
                        return
                    chunk = self._read(at, min(size, self.end - at))
                    size = min(size * 2, BLOCK)
                    j = chunk.find(b"\n")
                    if j >= 0:
                        i = at - base + j
                    chunks.append(chunk)
                    at += len(chunk)
                buf = b"".join(chunks)
                i = buf.find(b"\n", pos - base)
            raw, nxt = buf[pos - base : i], base + i + 1
            buf, base = buf[i + 1 :], nxt
            yield pos, nxt, raw
            pos = nxt

    def _from(self, offset: int) -> Iterator[tuple[int, int, bytes]]:
        """:meth:`forward` from the first line that begins at or after ``offset``."""
        lines = self.forward(max(offset - 1, 0))
        if offset > 0:
            next(lines, None)  # the rest of the line that byte offset - 1 is in
        return lines

    def _first_question(self, offset: int, limit: int) -> tuple[int, int] | None:
        """``(start, turn number)`` of the first user turn line beginning in [offset,
        limit). User turns are numbered as they are written, so their numbers never
        decrease along the file; answers can be written many turns late (a reply to a
        group member waits out a flood of messages, bot/arrivals.py), and a probe that
        landed on one put the bisection past the turn sought."""
        for start, _, raw in self._from(offset):
            if start >= limit:
                return None
            line = self.parse(raw)
            if line is not None and line.get("type") == "turn" and line.get("role") == "user":
                return start, int(line.get("turnNumber") or 0)
        return None

    def turn_offset(self, number: int) -> int:
        """The start of the first turn line numbered ``number`` or more (:attr:`end`
        when there is none): everything before it is older than that turn."""
        # User turn lines starting before lo are numbered below `number`; those starting
        # at or after hi are numbered `number` or more. No turn line before the user turn
        # numbered `number` has that number or more (an answer shares its question's
        # number and follows it), so the scan from lo finds that question.
        lo, hi = 0, self.end
        while hi - lo > BLOCK:
            mid = (lo + hi) // 2
            found = self._first_question(mid, hi)
            if found is None:
                hi = mid
            elif found[1] >= number:
                hi = found[0]
            else:
                lo = found[0] + 1
        first = next(self._from(lo), None)
        lo = self._back(self.end if first is None else first[0])
        for start, _, raw in self.forward(lo):
            line = self.parse(raw)
            if line is not None and line.get("type") == "turn":
                if int(line.get("turnNumber") or 0) >= number:
                    return start
        return self.end

    def _back(self, start: int) -> int:
        """The start of the :data:`BACK_TURNS` th turn line before ``start`` (or 0): a
        margin for a transcript whose user turns are out of order (written by hand, or
        imported), which the bisection assumes they are not."""
        turns = 0
        for begin, raw in self.backward(start):
            start = begin
            line = self.parse(raw)
            if line is not None and line.get("type") == "turn":
                turns += 1
                if turns >= BACK_TURNS:
                    break
        return start
