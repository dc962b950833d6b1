"""Pages of a conversation for the chat, read from the transcript a page at a time.

A page is what :func:`channels.web.views.page_of` cuts from the whole list of items (the
same rules; tests hold the two to the same pages), but read with
:class:`bot.transcript_seek.LineReader`: from the end of the file, or from the turn a
``before``/``around`` names, found by bisection. On 20,000 turns every page read and
parsed the whole file before (docs/web.md "Big conversations").

A page is bounded by bytes as well as by count: it stops before the item that would take
it past :data:`PAGE_BYTES` (one item always shows), and a turn longer than
:data:`TURN_CHARS` is cut, marked ``cut: {"shown", "total"}``; :func:`read_turn` gives
the whole of it (the chat's "Show all").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.graphemes import cut
from bot.transcript_seek import LineReader
from channels.web.views import event_view, turn_view

PAGE_BYTES = 512 * 1024  # text of one page, about
TURN_CHARS = 64 * 1024  # a longer turn is cut (its "Show all" fetches the rest)
ITEM_OVERHEAD = 200  # the JSON around an item's text, roughly
# How many turns of other numbers "Show all" reads past, looking for a late answer.
LATE_ANSWER_TURNS = 5000


@dataclass
class Page:
    items: list[dict[str, Any]] = field(default_factory=list)
    has_more: bool = False  # older items exist
    has_newer: bool = False  # newer items exist (a page opened around an older turn)
    # Where the page begins in the transcript (its byte offset): the next older page ends
    # there (``older_than``). "Before the first turn number" skipped what lay between a
    # flood's questions and a page of their late answers (bot/arrivals.py).
    start: int | None = None
    # Where it ends, when newer items follow: the next newer page begins there
    # (``newer_than``). Until session 27 a page opened around an old turn could only
    # jump to the latest one.
    end: int | None = None


def shown_turn(line: dict[str, Any]) -> dict[str, Any]:
    """A turn as the chat shows it, in a page or live: one longer than
    :data:`TURN_CHARS` cut between graphemes, marked ``cut``."""
    view = turn_view(line)
    content = view.get("content")
    if isinstance(content, str) and len(content) > TURN_CHARS:
        view["content"] = kept = cut(content, TURN_CHARS)
        view["cut"] = {"shown": len(kept), "total": len(content)}
    return view


def _view(line: dict[str, Any]) -> dict[str, Any] | None:
    if line.get("type") == "turn":
        return shown_turn(line)
    if line.get("type") == "event":
        return event_view(line)
    return None


def _cost(item: dict[str, Any]) -> int:
    text = item.get("content") if item["type"] == "turn" else item.get("text")
    return ITEM_OVERHEAD + len(text or "")


def _backward(reader: LineReader, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(offset of its line, item)`` of the items before ``end``, newest first."""
    for start, raw in reader.backward(end):
        line = reader.parse(raw)
        view = _view(line) if line is not None else None
        if view is not None:
            yield start, view


def _forward(reader: LineReader, start: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(offset after it, item)`` from ``start`` on."""
    for _, nxt, raw in reader.forward(start):
        line = reader.parse(raw)
        view = _view(line) if line is not None else None
        if view is not None:
            yield nxt, view


def _ahead(
    reader: LineReader, start: int, count: int, max_bytes: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """The items from ``start`` on, where they end, and whether newer items follow.

    ``count`` items (fewer past ``max_bytes``, at least one), then the rest of the last
    turn: a question without its answer, which lay just past the page, read as
    unanswered."""
    items: list[dict[str, Any]] = []
    end, cost, last = start, 0, None
    for nxt, item in _forward(reader, start):
        number = item.get("turnNumber") if item["type"] == "turn" else None
        if len(items) >= count or (items and cost + _cost(item) > max_bytes):
            if last is None or number != last:
                return items, end, True
        items.append(item)
        end, cost = nxt, cost + _cost(item)
        if number is not None:
            last = number
    return items, end, False


def read_page(
    path: Path,
    *,
    limit: int,
    before: int | None = None,
    around: int | None = None,
    older_than: int | None = None,
    newer_than: int | None = None,
    max_bytes: int = PAGE_BYTES,
) -> Page:
    """The page :func:`~channels.web.views.page_of` would give (``before``: items before
    that turn number; ``around``: a window holding that turn; ``older_than``: the items
    before that offset, a page's :attr:`Page.start`; ``newer_than``: the items from a
    page's :attr:`Page.end` on; else the last), bounded by ``max_bytes`` too. A missing
    transcript is an empty page. Blocking: run it in a thread.
    """
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return Page()
    with reader:
        if newer_than is not None:
            start = max(0, min(newer_than, reader.end))
            items, end, has_newer = _ahead(reader, start, limit, max_bytes)
            return Page(items, start > 0, has_newer, start, end if has_newer else None)
        end, has_newer = reader.end, False
        if older_than is not None:
            # (an offset inside a line, from a stale or forged cursor, only makes that
            # line's part unreadable: parse() skips it)
            end = max(0, min(older_than, reader.end))
        elif before is not None:
            end = reader.turn_offset(before)
        elif around is not None:
            hit = reader.turn_offset(around)
            if hit < reader.end:
                _, end, has_newer = _ahead(reader, hit, max(limit // 2, 1), max_bytes // 2)
        after = end if has_newer else None  # where the next newer page begins
        older = _backward(reader, end)
        page: list[tuple[int, dict[str, Any]]] = []  # newest first until reversed below
        cost, left_out = 0, None
        for entry in older:
            if len(page) >= limit or (page and cost + _cost(entry[1]) > max_bytes):
                left_out = entry
                break
            page.append(entry)
            cost += _cost(entry[1])
        page.reverse()
        if left_out is None:
            return Page([item for _, item in page], False, has_newer, None, after)
        # Begin where paging on from here ends ("before" the first turn number): notes
        # before the first turn come with the next page, and a question sharing its
        # number with the answer that begins the page comes with this one.
        first = next((i for i, (_, it) in enumerate(page) if it["type"] == "turn"), None)
        if first is None:
            return Page([item for _, item in page], True, has_newer, page[0][0], after)
        number, more = page[first][1]["turnNumber"], False
        # Notes before the page's first turn, newest first: on the next page unless a
        # turn of the same number comes before them.
        pending = page[first - 1 :: -1] if first else []
        page = page[first:]
        for entry in itertools.chain([left_out], older):
            item = entry[1]
            if item["type"] == "event":
                pending.append(entry)
                continue
            if item["turnNumber"] != number:
                more = True
                break
            page = [entry, *reversed(pending), *page]
            pending = []
        return Page([item for _, item in page], more or bool(pending), has_newer, page[0][0], after)


def read_turn(path: Path, number: int, role: str) -> dict[str, Any] | None:
    """The whole of turn ``number`` by ``role`` (a cut one's "Show all"), or None."""
    try:
        reader = LineReader(path)
    except FileNotFoundError:
        return None
    with reader:
        # Turns of other numbers passed: an answer can follow the next questions, as
        # many as came during a flood before it was written (bot/arrivals.py).
        others = 0
        for _, _, raw in reader.forward(reader.turn_offset(number)):
            line = reader.parse(raw)
            if line is None or line.get("type") != "turn":
                continue
            if line.get("turnNumber") == number and line.get("role") == role:
                return turn_view(line)
            if line.get("turnNumber") != number:
                others += 1
                if others >= LATE_ANSWER_TURNS:
                    break
    return None
