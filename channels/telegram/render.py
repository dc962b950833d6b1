"""Markdown from the model -> HTML that Telegram always accepts, and splitting into parts.

Telegram's HTML parse mode knows a handful of tags and rejects the whole message when a
tag is unknown, unclosed or badly nested, or when a bare ``<``/``&`` appears. So nothing
from the model is trusted: every character is escaped first and only a small Markdown
subset is turned into tags by a stack-based parser that can only emit balanced output
(bold, italic, strikethrough, inline code, fenced code, http(s) links, headings, quotes).

:func:`split_html` cuts a rendered text into parts of at most 4,096 UTF-16 units (the
Bot API limit) on paragraph, then line, then word boundaries, never inside a tag, an
entity or a character (a run without spaces is cut between grapheme clusters); tags
open at a cut are closed at the end of the part and reopened in the next (inside a code
block, the next part keeps the indentation of its first line).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from bot.graphemes import MAX_CLUSTER, is_boundary

TELEGRAM_LIMIT = 4096
MIN_SPLIT_LIMIT = 5  # the longest escaped character, "&amp;"

# A fence at any indentation: inside a list item the model indents it (often by four
# spaces), and a fence taken for text had its code read as Markdown (``a*b*c`` lost its
# asterisks to italics, the copied command was wrong).
_FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+#.-]*)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
# [label](url), the url may hold one level of balanced parentheses (Wikipedia links).
_LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\(\s*((?:[^\s()]|\([^\s()]*\)){1,2000})\s*\)")
_SAFE_URL = re.compile(r"^https?://[^\s<>]+$", re.IGNORECASE)

# Markdown delimiter -> Telegram tag. Longer delimiters first so "**" wins over "*".
_DELIMS: tuple[tuple[str, str], ...] = (
    ("**", "b"),
    ("__", "b"),
    ("~~", "s"),
    ("*", "i"),
    ("_", "i"),
)


def utf16_len(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def escape(text: str) -> str:
    """Escape the three characters Telegram's HTML mode reserves."""
    return html.escape(text, quote=False)


def _safe_href(url: str) -> str | None:
    url = html.unescape(url)
    if not _SAFE_URL.match(url):
        return None
    return html.escape(url, quote=True)


def render_inline(text: str, *, links: bool = True) -> str:
    """Render one line of Markdown inline syntax to balanced Telegram HTML."""
    out: list[str] = []
    stack: list[tuple[str, int]] = []  # (delimiter, index of its literal in out)
    i, n = 0, len(text)
    plain: list[str] = []

    def flush() -> None:
        if plain:
            out.append(escape("".join(plain)))
            plain.clear()

    while i < n:
        ch = text[i]
        if ch == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            ticks = "`" * run
            end = text.find(ticks, i + run)
            if end != -1 and text[end + run : end + run + 1] != "`":
                flush()
                out.append(f"<code>{escape(text[i + run : end])}</code>")
                i = end + run
                continue
            plain.append(ticks)
            i += run
            continue
        if ch == "[" and links:
            m = _LINK.match(text, i)
            if m:
                href = _safe_href(m.group(2))
                if href is not None:
                    flush()
                    label = render_inline(m.group(1), links=False)
                    out.append(f'<a href="{href}">{label}</a>')
                    i = m.end()
                    continue
        delim = next((d for d, _ in _DELIMS if text.startswith(d, i)), None)
        if delim is not None:
            before = text[i - 1] if i > 0 else " "
            after = text[i + len(delim)] if i + len(delim) < n else " "
            can_open = not after.isspace()
            can_close = not before.isspace()
            if delim[0] == "_":  # intraword underscores (snake_case) are literal
                can_open = can_open and not before.isalnum()
                can_close = can_close and not after.isalnum()
            depth = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == delim), None)
            if can_close and depth is not None:
                flush()
                pos = stack[depth][1]
                del stack[depth:]  # unclosed openers above it stay literal text
                tag = dict(_DELIMS)[delim]
                inner = "".join(out[pos + 1 :])
                out[pos:] = [f"<{tag}>{inner}</{tag}>"] if inner else [delim + delim]
                i += len(delim)
                continue
            if can_open:
                flush()
                stack.append((delim, len(out)))
                out.append(escape(delim))
                i += len(delim)
                continue
            plain.append(delim)
            i += len(delim)
            continue
        plain.append(ch)
        i += 1
    flush()
    return "".join(out)


def markdown_to_html(markdown: str) -> str:
    """Convert model Markdown to Telegram HTML; the result always parses."""
    lines = markdown.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    quote: list[str] = []
    i = 0

    def flush_quote() -> None:
        if quote:
            out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote.clear()

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush_quote()
            indent, marker, lang = fence.group(1), fence.group(2), fence.group(3)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                # the fence's own indentation is the list's, not the code's
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
                i += 1
            code = escape("\n".join(body)) or " "
            if lang and re.fullmatch(r"[\w+#.-]+", lang):
                out.append(f'<pre><code class="language-{escape(lang)}">{code}</code></pre>')
            else:
                out.append(f"<pre>{code}</pre>")
            if i < len(lines):
                # The closing fence; words after it ("``` and then run it") were dropped.
                after = lines[i].strip()[len(marker) :].lstrip(marker[0]).strip()
                if after:
                    lines[i] = after
                    continue
            i += 1
            continue
        q = _QUOTE.match(line)
        if q:
            quote.append(render_inline(q.group(1)))
            i += 1
            continue
        flush_quote()
        heading = _HEADING.match(line)
        if heading:
            out.append(f"<b>{render_inline(heading.group(1))}</b>")
        elif _RULE.match(line):
            out.append("──────────")
        else:
            bullet = _BULLET.match(line)
            if bullet:
                out.append(f"{bullet.group(1)}• {render_inline(bullet.group(2))}")
            else:
                out.append(render_inline(line))
        i += 1
    flush_quote()
    return "\n".join(out).strip("\n")


# --- splitting ---------------------------------------------------------------------------

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
    """Blank the close tags (from ``start`` on) of the elements open in ``stack``."""
    for opened in reversed(stack):
        depth = 0
        for k in range(start, len(units)):
            u = units[k]
            if u.tag == opened.tag and u.kind in ("open", "close"):
                depth += 1 if u.kind == "open" else -1
                if depth < 0:
                    units[k] = _Unit("", "char")
                    break


def _shortest(unit: _Unit) -> list[_Unit]:
    """A character (entity) in its shortest spelling: ``&#x1F600;`` as the emoji itself,
    ``&quot;`` as ``"``; ``&amp;`` (5 units) is the longest there is."""
    return _units(escape(html.unescape(unit.text)))


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
        local = list(stack)
        # candidates: (priority, cut index, resume index, stack snapshot)
        best: dict[int, tuple[int, int, list[_Unit]]] = {}
        j = start
        fits_all = True
        while j < len(units):
            u = units[j]
            new_local = local
            if u.kind == "open":
                new_local = [*local, u]
            elif u.kind == "close" and local and local[-1].tag == u.tag:
                new_local = local[:-1]
            cost = utf16_len(u.text)
            if size + cost + utf16_len(_closing(new_local)) > limit:
                fits_all = False
                break
            if u.kind == "char" and u.text in ("\n", " "):
                k = j
                while k < len(units) and units[k].kind == "char" and units[k].text in ("\n", " "):
                    k += 1
                gap = "".join(units[x].text for x in range(j, k))
                prio = 0 if gap.count("\n") >= 2 else 1 if "\n" in gap else 2
                resume = k
                if "\n" in gap and any(t.tag == "pre" for t in local):
                    # Code: the next part starts its line with that line's indentation
                    # (Telegram keeps leading spaces inside an entity).
                    resume = j + gap.rindex("\n") + 1
                if j > start:
                    best[prio] = (j, resume, list(local))
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
        text = prefix + "".join(u.text for u in body) + _closing(snap)
        if _visible(body).strip():
            parts.append(text)
        stack = snap
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


def render_parts(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown -> Telegram HTML parts, ready for ``sendMessage(parse_mode="HTML")``."""
    return split_visible(markdown_to_html(markdown), limit)


def html_to_plain(markup: str) -> str:
    """The visible text of rendered HTML (the fallback when Telegram rejects a part)."""
    return _visible(_units(markup))
