"""Rendered Telegram HTML cut into parts Telegram takes (:func:`split_html`).

A part holds at most 4,096 UTF-16 units (the Bot API limit). It is cut on paragraph,
then line, then word boundaries, never inside a tag, an entity or a character (a run
without spaces is cut between grapheme clusters); tags open at a cut are closed at the
end of the part and reopened in the next (inside a code block, the next part keeps the
indentation of its first line). :func:`split_visible` counts as Telegram does, after
entity parsing. The Markdown that becomes this HTML is ``render.py``'s.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from bot.graphemes import MAX_CLUSTER, is_boundary

TELEGRAM_LIMIT = 4096
MIN_SPLIT_LIMIT = 5  # the longest escaped character, "&amp;"
# Nesting past this, whose tags take half a part, goes (a few elements, a long link's
# address, keep their formatting in every part, as at the tiny limits of the tests)
_DEEP = 8


def utf16_len(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


_TOKEN = re.compile(r"<(/?)([a-zA-Z-]+)([^>]*)>|&#?\w+;|[^<&]|[<&]")


@dataclass(frozen=True)
class _Unit:
    text: str
    kind: str  # "open", "close", "char"
    tag: str = ""


def _units(markup: str) -> list[_Unit]:
    units: list[_Unit] = []
    for m in _TOKEN.finditer(markup):
        if m.group(2) is not None:
            kind = "close" if m.group(1) else "open"
            units.append(_Unit(m.group(0), kind, m.group(2).lower()))
        else:
            units.append(_Unit(m.group(0), "char"))
    return units


def _closing(stack: list[_Unit]) -> str:
    return "".join(f"</{u.tag}>" for u in reversed(stack))


@dataclass(frozen=True)
class _Open:
    """The elements open at a point of the markup, innermost first, shared by every
    snapshot taken there: a list copied at each tag and each candidate cut, and its
    closing tags joined again at every character, made the split quadratic in the
    nesting (8 KiB of nested emphasis took 7 s, 16 KiB 234 s; session 30)."""

    unit: _Unit
    parent: _Open | None
    closing: int  # UTF-16 units of the closing tags of this element and those around it
    in_pre: bool  # this element or one around it is a code block


def _opened(unit: _Unit, parent: _Open | None) -> _Open:
    if parent is None:
        return _Open(unit, None, len(unit.tag) + 3, unit.tag == "pre")
    return _Open(
        unit, parent, parent.closing + len(unit.tag) + 3, parent.in_pre or unit.tag == "pre"
    )


def _closing_len(node: _Open | None) -> int:
    return node.closing if node is not None else 0


def _as_list(node: _Open | None) -> list[_Unit]:
    """The open elements, outermost first (what :func:`_closing` and a part's prefix read)."""
    stack = []
    while node is not None:
        stack.append(node.unit)
        node = node.parent
    stack.reverse()
    return stack


def _as_node(stack: list[_Unit]) -> _Open | None:
    node = None
    for unit in stack:
        node = _opened(unit, node)
    return node


def _visible(units: list[_Unit]) -> str:
    return html.unescape("".join(u.text for u in units if u.kind == "char"))


def _drop_element(units: list[_Unit], index: int) -> None:
    """Blank the open tag at ``index`` and its matching close tag (content stays)."""
    tag, depth = units[index].tag, 0
    for k in range(index, len(units)):
        u = units[k]
        if u.tag == tag and u.kind in ("open", "close"):
            depth += 1 if u.kind == "open" else -1
            units[k] = _Unit("", "char")
            if depth == 0:
                return


def _drop_open(units: list[_Unit], start: int, stack: list[_Unit]) -> None:
    """Blank the close tags (from ``start`` on) of the elements open in ``stack``: one
    pass, the markup being balanced (a pass per element was quadratic in the nesting)."""
    depth, closing = 0, len(stack) - 1
    for k in range(start, len(units)):
        if closing < 0:
            return
        u = units[k]
        if u.kind == "open":
            depth += 1
        elif u.kind == "close" and depth > 0:
            depth -= 1
        elif u.kind == "close" and u.tag == stack[closing].tag:
            units[k] = _Unit("", "char")
            closing -= 1


def _shortest(unit: _Unit) -> list[_Unit]:
    """A character (entity) in its shortest spelling: ``&#x1F600;`` as the emoji itself,
    ``&quot;`` as ``"``; ``&amp;`` (5 units) is the longest there is."""
    return _units(html.escape(html.unescape(unit.text), quote=False))


def _between_characters(units: list[_Unit], start: int, j: int) -> int:
    """``j`` moved back so that a cut before ``units[j]`` falls between two characters
    (grapheme clusters); ``j`` itself when everything since ``start`` is one cluster. A
    tag between two units is a boundary: no cluster spans one."""
    k = j
    while k > start and j - k <= MAX_CLUSTER:
        if units[k].kind != "char" or units[k - 1].kind != "char":
            return k
        lo = k - 1
        while lo > start and units[lo - 1].kind == "char" and k - lo <= MAX_CLUSTER:
            lo -= 1
        before = html.unescape("".join(u.text for u in units[lo:k]))
        if is_boundary(before + html.unescape(units[k].text), len(before)):
            return k
        k -= 1
    return j


def split_html(markup: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Cut balanced HTML into ordered parts of at most ``limit`` UTF-16 units each.

    A limit too small for the formatting (the tags to reopen and close around even one
    character) keeps the words without it; ``limit`` must hold one escaped character
    (``&amp;``, :data:`MIN_SPLIT_LIMIT`), else ValueError.
    """
    if limit < MIN_SPLIT_LIMIT:
        raise ValueError(f"limit {limit} cannot hold one escaped character ({MIN_SPLIT_LIMIT})")
    if utf16_len(markup) <= limit:
        return [markup] if _visible(_units(markup)).strip() else []
    units = _units(markup)
    parts: list[str] = []
    start = 0
    stack: list[_Unit] = []
    while start < len(units):
        prefix = "".join(u.text for u in stack)
        size = utf16_len(prefix)
        if len(stack) > _DEEP and (size + utf16_len(_closing(stack))) * 2 > limit:
            # The tags reopened and closed would take half the part (hundreds of nested
            # elements): the rest of those elements goes without them, words kept.
            # Before, each part held a few characters: 2,394 messages for 16 KiB.
            _drop_open(units, start, stack)
            stack = []
            continue
        local = _as_node(stack)
        # candidates: (priority, cut index, resume index, open elements there)
        best: dict[int, tuple[int, int, _Open | None]] = {}
        j = start
        fits_all = True
        while j < len(units):
            u = units[j]
            new_local = local
            if u.kind == "open":
                new_local = _opened(u, local)
            elif u.kind == "close" and local is not None and local.unit.tag == u.tag:
                new_local = local.parent
            cost = utf16_len(u.text)
            if size + cost + _closing_len(new_local) > limit:
                fits_all = False
                break
            if u.kind == "char" and u.text in ("\n", " "):
                k = j
                while k < len(units) and units[k].kind == "char" and units[k].text in ("\n", " "):
                    k += 1
                gap = "".join(units[x].text for x in range(j, k))
                prio = 0 if gap.count("\n") >= 2 else 1 if "\n" in gap else 2
                resume = k
                if "\n" in gap and local is not None and local.in_pre:
                    # Code: the next part starts its line with that line's indentation
                    # (Telegram keeps leading spaces inside an entity).
                    resume = j + gap.rindex("\n") + 1
                if j > start:
                    best[prio] = (j, resume, local)
            size += cost
            local = new_local
            j += 1
        if fits_all:
            cut, resume, snap = len(units), len(units), local
        else:
            chosen = None
            filled = sum(utf16_len(units[x].text) for x in range(start, j))
            for prio in (0, 1, 2):
                cand = best.get(prio)
                if (
                    cand
                    and sum(utf16_len(units[x].text) for x in range(start, cand[0])) * 2 >= filled
                ):
                    chosen = cand
                    break
            if chosen is None and best:
                chosen = best[max(best, key=lambda p: best[p][0])]
            if chosen is None or chosen[0] <= start:
                # hard split, between two characters: cut by units, a wall of emoji
                # ended a part in "man + ZWJ" and began the next with "woman + girl"
                at = _between_characters(units, start, j)
                chosen = (at, at, local)  # only characters are stepped over: same tags
            cut, resume, snap = chosen
            if cut <= start and units[start].kind == "open":
                # A tag that fits in no part (a link whose escaped address passes the
                # limit): its words are kept, without it.
                _drop_element(units, start)
                continue
            if cut <= start and stack:
                # Not even one character fits between the tags reopened here and their
                # closing (a tiny limit): the rest of those elements goes without them.
                # Before, the part was cut anyway and passed the limit.
                _drop_open(units, start, stack)
                stack = []
                continue
            if cut <= start:
                # One character spelt longer than the limit (``&#x1F600;``): respelt.
                # Before, it went alone in a part over the limit.
                shorter = _shortest(units[start])
                if len(shorter) != 1 or utf16_len(shorter[0].text) > limit:
                    raise ValueError(f"{units[start].text!r} does not fit in {limit} units")
                units[start] = shorter[0]
                continue
        body = units[start:cut]
        stack = _as_list(snap)
        text = prefix + "".join(u.text for u in body) + _closing(stack)
        if _visible(body).strip():
            parts.append(text)
        start = resume
    return parts


def split_visible(markup: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """:func:`split_html` by Telegram's own count: at most ``limit`` UTF-16 units *after
    entity parsing* per part (a tag counts nothing, ``&lt;`` one). Cut by the markup's
    length, a reply full of ``<`` and ``&`` (HTML or shell code) went out in three to
    five times as many messages as it needed. :func:`split_html` is run with a larger
    budget, as dense as the markup, and a smaller one until every part fits (at worst
    ``limit`` itself, where every part fits by construction)."""
    shown = utf16_len(_visible(_units(markup)))
    budget = limit if shown == 0 else max(limit, min(5 * limit, utf16_len(markup) * limit // shown))
    while True:
        parts = split_html(markup, budget)
        if budget <= limit or all(utf16_len(html_to_plain(p)) <= limit for p in parts):
            return parts
        budget = max(limit, budget * 9 // 10)


def html_to_plain(markup: str) -> str:
    """The visible text of rendered HTML (the fallback when Telegram rejects a part)."""
    return _visible(_units(markup))
