"""Markdown from the model -> HTML that Telegram always accepts, and splitting into parts.

Telegram's HTML parse mode knows a handful of tags and rejects the whole message when a
tag is unknown, unclosed or badly nested, or when a bare ``<``/``&`` appears. The
Markdown is read by :mod:`channels.markdown_blocks` (as for e-mail), whose inline
parser escapes everything and can only emit balanced tags Telegram knows (bold,
italic, strikethrough, inline code, http(s) links); the blocks become them too (fenced
code, headings, quotes, list bullets, tables in ``tables.py``).

:func:`render_parts` then cuts it into parts Telegram takes (``splitting.py``).
"""

from __future__ import annotations

from channels.markdown_blocks import blocks, escape, render_inline
from channels.telegram.splitting import (
    MIN_SPLIT_LIMIT,
    TELEGRAM_LIMIT,
    html_to_plain,
    split_html,
    split_visible,
    utf16_len,
)
from channels.telegram.tables import render_table

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


def markdown_to_html(markdown: str) -> str:
    """Convert model Markdown to Telegram HTML; the result always parses."""
    out: list[str] = []
    quote: list[str] = []

    def flush_quote() -> None:
        if quote:
            out.append("<blockquote>" + "\n".join(quote) + "</blockquote>")
            quote.clear()

    for block in blocks(markdown):
        if block.kind == "quote":
            quote.append(render_inline(block.text))
            continue
        flush_quote()
        if block.kind == "code":
            code = escape(block.text) or " "
            if block.lang:
                out.append(f'<pre><code class="language-{escape(block.lang)}">{code}</code></pre>')
            else:
                out.append(f"<pre>{code}</pre>")
        elif block.kind == "table":
            # Telegram has no tables: aligned in monospace, or a row per entry when wide
            out.append(render_table(list(block.rows), render_inline, escape))
        elif block.kind == "heading":
            out.append(f"<b>{render_inline(block.text)}</b>")
        elif block.kind == "rule":
            out.append("──────────")
        elif block.kind == "bullet":
            out.append(f"{block.indent}• {render_inline(block.text)}")
        else:  # text, and a numbered item as it was written
            out.append(render_inline(block.line))
    flush_quote()
    return "\n".join(out).strip("\n")


def render_parts(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown -> Telegram HTML parts, ready for ``sendMessage(parse_mode="HTML")``."""
    return split_visible(markdown_to_html(markdown), limit)
