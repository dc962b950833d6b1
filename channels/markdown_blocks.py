"""The Markdown the model writes, read the same way by every channel that renders it.

The model (and the offline brain) answer in Markdown. Telegram shows it in its HTML
subset (``channels/telegram/render.py``), e-mail as the HTML part of the answer
(``channels/email/html_body.py``): both read it here, :func:`blocks` for the lines
(fenced code, tables, quotes, headings, rules, list items, text) and
:func:`render_inline` for the spans of one line. Nothing from the model is trusted:
every character is escaped first and only a small subset becomes tags, by a parser
that can only emit balanced output (``<b>``, ``<i>``, ``<s>``, ``<code>``, and ``<a>``
for links to http(s), and mailto when asked). The dashboard renders in the browser
(``channels/web/static/markdown.js``), into DOM nodes, and shares no code with this.

Reading takes time in proportion to the text however it nests or whatever its lines
hold (an answer may be 256 KiB): before session 30 a heading of one word and 1,000
spaces took 7 s (its pattern backtracked in cubic time), the spaces of a fence line or
of a row of dashes quadratic time, and nested spans copied their insides once per level
(``tests/channels/test_markdown_nesting.py``). A heading keeps a ``#`` that ends a word
("# Learning C#"; it lost it as if it closed the heading).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

# A fence at any indentation: inside a list item the model indents it (often by four
# spaces), and a fence taken for text had its code read as Markdown (``a*b*c`` lost its
# asterisks to italics, the copied command was wrong).
# Each pattern matches in one pass over a line: the model's answer may be 256 KiB, and a
# heading's "(.*?)\s*#*\s*$" took cubic time over the spaces of one line ("# a", 1,000
# spaces, "x": 7 s; the trailing spaces of a fence or a row of dashes, quadratic). What
# the old patterns left to backtracking (the words after a fence's language, a heading's
# closing #s, a row of dashes' cells) is read in code.
_FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+#.-]*)(.*)$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^(\s*)(\d{1,9})[.)]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_DASHES = re.compile(r":?-+:?")
_TICKS = re.compile(r"`+")
_MARKUP = re.compile(r"[`\[*_~]")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
# Wider is no table a person writes: left as text, so that a line of 100,000 pipes does
# not become 100,000 cells (the dashboard's limit too).
MAX_COLUMNS = 64
# [label](url), the url may hold one level of balanced parentheses (Wikipedia links).
_LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\(\s*((?:[^\s()]|\([^\s()]*\)){1,2000})\s*\)")
_WEB_URL = re.compile(r"^https?://[^\s<>]+$", re.IGNORECASE)
_MAIL_URL = re.compile(r"^(?:https?://|mailto:)[^\s<>]+$", re.IGNORECASE)

# Markdown delimiter -> tag. Longer delimiters first so "**" wins over "*".
_DELIMS: tuple[tuple[str, str], ...] = (
    ("**", "b"),
    ("__", "b"),
    ("~~", "s"),
    ("*", "i"),
    ("_", "i"),
)
_TAGS = dict(_DELIMS)

BlockKind = Literal["code", "table", "quote", "heading", "rule", "bullet", "numbered", "text"]


@dataclass(frozen=True)
class Block:
    """One piece of a Markdown text. ``text``: the inline Markdown of a heading, quote
    line, list item or text line, the code of a fenced block; ``line``: the line as
    written (a numbered item shown as text keeps its number); ``indent``: a list item's
    indentation; ``level``: a heading's (1-6), a numbered item's number; ``lang``: a
    fence's language; ``rows``: a table's lines (header, dashes, rows)."""

    kind: BlockKind
    text: str = ""
    line: str = ""
    indent: str = ""
    level: int = 0
    lang: str = ""
    rows: tuple[str, ...] = ()


def escape(text: str) -> str:
    """``text`` with the three characters HTML reserves in text escaped."""
    return html.escape(text, quote=False)


def cells(line: str) -> list[str]:
    """The cells of a table row: split at pipes (not at ``\\|``), the outer ones dropped."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(body)]


def dashes_row(line: str) -> bool:
    """Whether ``line`` is a table's row of dashes: cells of ``---`` (``:---``, ``---:``,
    ``:---:``) between pipes, the outer pipes optional."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return all(_DASHES.fullmatch(cell.strip()) for cell in body.split("|"))


def right_aligned(delimiter: str) -> list[bool]:
    """Which columns a table's row of dashes aligns right (``---:``)."""
    return [c.endswith(":") and not c.startswith(":") for c in cells(delimiter)]


def find_table(lines: list[str], i: int) -> int:
    """The index after the table starting at ``lines[i]`` (a header row, then a row of
    dashes with as many cells, at most :data:`MAX_COLUMNS`), or ``i`` when none does."""
    if i + 1 >= len(lines) or "|" not in lines[i] or not dashes_row(lines[i + 1]):
        return i
    if "|" not in lines[i + 1] or lines[i].count("|") > MAX_COLUMNS + 1:
        return i
    if len(cells(lines[i + 1])) != len(cells(lines[i])):
        return i
    end = i + 2
    while end < len(lines) and lines[end].strip() and "|" in lines[end]:
        end += 1
    return end


def _safe_href(url: str, mailto: bool) -> str | None:
    url = html.unescape(url)
    if not (_MAIL_URL if mailto else _WEB_URL).match(url):
        return None
    return html.escape(url, quote=True)


def render_inline(text: str, *, links: bool = True, mailto: bool = False) -> str:
    """One line of Markdown inline syntax as balanced HTML (``<b>``, ``<i>``, ``<s>``,
    ``<code>``, ``<a>``). ``links``: whether ``[label](url)`` becomes a link (http(s)
    only; with ``mailto``, mailto: too); any other URL stays the text it was."""
    out: list[str] = []  # pieces of HTML, none empty
    stack: list[tuple[str, int]] = []  # (delimiter, index of its literal in out)
    # openers on the stack per delimiter: a closer with none open looks no further (it
    # searched the whole stack, and "*a " * n + "b~~ " * n took seconds at n = 8,000)
    opened = dict.fromkeys(_TAGS, 0)
    i, n = 0, len(text)
    plain: list[str] = []

    # Where the first run of at least so many backticks starts at or after a position,
    # per run length: positions only grow, so each length's search goes over the text
    # once (searched afresh at every run, a line of unclosed runs was quadratic).
    found: dict[str, int] = {}

    def closing_ticks(ticks: str, start: int) -> int:
        at = found.get(ticks)
        if at is None or (at != -1 and at < start):
            at = found[ticks] = text.find(ticks, start)
        return at

    def flush() -> None:
        if plain:
            out.append(escape("".join(plain)))
            plain.clear()

    while i < n:
        ch = text[i]
        if ch == "`":
            ticks_end = _TICKS.match(text, i)  # (text[i:] copied the rest each time)
            run = (ticks_end.end() if ticks_end else i + 1) - i
            ticks = "`" * run
            end = closing_ticks(ticks, i + run)
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
                href = _safe_href(m.group(2), mailto)
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
            depth = None
            if can_close and opened[delim]:
                depth = next(k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == delim)
            if depth is not None:
                flush()
                pos = stack[depth][1]
                for closed, _ in stack[depth:]:
                    opened[closed] -= 1
                del stack[depth:]  # unclosed openers above it stay literal text
                tag = _TAGS[delim]
                # The tags go around the pieces in place (every piece in out is text):
                # joined into one piece at each close, n nested spans copied their
                # insides n times ("*a " * n + "b* " * n: seconds at n = 45,000).
                if len(out) > pos + 1:
                    out[pos] = f"<{tag}>"
                    out.append(f"</{tag}>")
                else:
                    out[pos] = delim + delim
                i += len(delim)
                continue
            if can_open:
                flush()
                stack.append((delim, len(out)))
                opened[delim] += 1
                out.append(escape(delim))
                i += len(delim)
                continue
            plain.append(delim)
            i += len(delim)
            continue
        # Up to the next character that may start markup, at once (a loop turn for
        # each character made every answer's plain text the slow part).
        run_end = _MARKUP.search(text, i + 1)
        end = n if run_end is None else run_end.start()
        plain.append(text[i:end])
        i = end
    flush()
    return "".join(out)


def blocks(markdown: str) -> Iterator[Block]:
    """The blocks of ``markdown``, in order; a blank line is a ``text`` block of ``""``."""
    lines = markdown.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence and not fence.group(4).strip():  # words after the language: no fence
            indent, marker, lang = fence.group(1), fence.group(2), fence.group(3)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                # the fence's own indentation is the list's, not the code's
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
                i += 1
            yield Block("code", text="\n".join(body), line=line, lang=lang)
            if i < len(lines):
                # The closing fence; words after it ("``` and then run it") were dropped.
                after = lines[i].strip()[len(marker) :].lstrip(marker[0]).strip()
                if after:
                    lines[i] = after
                    continue
            i += 1
            continue
        table_end = find_table(lines, i)
        if table_end > i:
            yield Block("table", line=line, rows=tuple(lines[i:table_end]))
            i = table_end
            continue
        i += 1
        yield _line_block(line)


def heading_text(rest: str) -> str:
    """A heading's text from what follows its ``#``s: without the closing ``#``s a space
    sets apart ("## Plan ##"), keeping those of a word ("# Learning C#")."""
    text = rest.rstrip()
    core = text.rstrip("#")
    if not core or core[-1].isspace():
        return core.rstrip()
    return text


def _line_block(line: str) -> Block:
    """The block of one line outside code and tables."""
    if q := _QUOTE.match(line):
        return Block("quote", text=q.group(1), line=line)
    if heading := _HEADING.match(line):
        text = heading_text(heading.group(2))
        return Block("heading", text=text, line=line, level=len(heading.group(1)))
    if _RULE.match(line):
        return Block("rule", line=line)
    if bullet := _BULLET.match(line):
        return Block("bullet", text=bullet.group(2), line=line, indent=bullet.group(1))
    if numbered := _NUMBERED.match(line):
        return Block(
            "numbered",
            text=numbered.group(3),
            line=line,
            indent=numbered.group(1),
            level=int(numbered.group(2)),
        )
    return Block("text", text=line, line=line)
