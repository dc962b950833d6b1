"""Markdown from the model -> HTML that Telegram always accepts, and splitting into parts.

Telegram's HTML parse mode knows a handful of tags and rejects the whole message when a
tag is unknown, unclosed or badly nested, or when a bare ``<``/``&`` appears. So nothing
from the model is trusted: every character is escaped first and only a small Markdown
subset is turned into tags by a stack-based parser that can only emit balanced output
(bold, italic, strikethrough, inline code, fenced code, http(s) links, headings, quotes).

:func:`render_parts` then cuts it into parts Telegram takes (``splitting.py``).
"""

from __future__ import annotations

import html
import re

from channels.telegram.splitting import (
    MIN_SPLIT_LIMIT,
    TELEGRAM_LIMIT,
    html_to_plain,
    split_html,
    split_visible,
    utf16_len,
)
from channels.telegram.tables import find_table, render_table

# Splitting lives in splitting.py; these names are imported from here too.
__all__ = [
    "MIN_SPLIT_LIMIT",
    "TELEGRAM_LIMIT",
    "escape",
    "html_to_plain",
    "markdown_to_html",
    "render_inline",
    "render_parts",
    "split_html",
    "split_visible",
    "utf16_len",
]

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
        table_end = find_table(lines, i)
        if table_end > i:
            # Telegram has no tables: aligned in monospace, or a row per entry when wide
            flush_quote()
            out.append(render_table(lines[i:table_end], render_inline, escape))
            i = table_end
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


def render_parts(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown -> Telegram HTML parts, ready for ``sendMessage(parse_mode="HTML")``."""
    return split_visible(markdown_to_html(markdown), limit)
