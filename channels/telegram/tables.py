"""Markdown tables from the model, made readable in Telegram, which has no tables.

Sent as they came, a table was its raw pipes, a ``|---|---|`` line of dashes and
columns that did not line up in the phone's proportional font. Now a table narrow
enough for a phone (:data:`PHONE_COLUMNS` characters) is an aligned monospace block;
a wider one, which would wrap in a block and scramble its columns, is one entry per
row: the first cell in bold, then each other cell under its column's name.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from channels.markdown_blocks import cells, right_aligned
from channels.telegram.splitting import html_to_plain

# Characters of monospace text a phone shows on one line in portrait (Telegram's code
# block on a 6" screen shows about 40-45).
PHONE_COLUMNS = 42
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(([^\s()]+)\)")

Inline = Callable[..., str]  # render.render_inline: Markdown inline -> Telegram HTML


def _width(text: str) -> int:
    """Columns ``text`` takes in a monospace font: wide (CJK, emoji) 2, marks 0."""
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in text
    )


def _plain(cell: str, inline: Inline) -> str:
    """A cell's visible words (its Markdown emphasis gone, a link's address kept)."""
    with_urls = _LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", cell)
    return html_to_plain(inline(with_urls, links=False))


def render_table(lines: list[str], inline: Inline, escape: Callable[[str], str]) -> str:
    """Telegram HTML for a table's ``lines`` (header, dashes, rows; found by
    :func:`channels.markdown_blocks.find_table`)."""
    header = cells(lines[0])
    right = right_aligned(lines[1])
    rows = [(cells(line) + [""] * len(header))[: len(header)] for line in lines[2:]]
    plain = [[_plain(c, inline) for c in row] for row in [header, *rows]]
    widths = [max(_width(row[k]) for row in plain) for k in range(len(header))]
    if sum(widths) + 3 * (len(widths) - 1) <= PHONE_COLUMNS:
        out = []
        for n, row in enumerate(plain):
            padded = []
            for k, cell in enumerate(row):
                pad = " " * (widths[k] - _width(cell))
                padded.append(pad + cell if right[k] else cell + pad)
            out.append(" │ ".join(padded).rstrip())
            if n == 0:
                out.append("─┼─".join("─" * w for w in widths))
        return "<pre>" + escape("\n".join(out)) + "</pre>"
    entries = []
    names = [inline(h) for h in header]
    for row, shown in zip(rows, plain[1:], strict=True):
        first = escape(shown[0])  # in bold: its own emphasis would only nest
        lines_out = [f"<b>{first}</b>" if first else "•"]
        lines_out += [
            f"  {names[k]}: {inline(c)}" if names[k] else f"  {inline(c)}"
            for k, c in enumerate(row)
            if k and c
        ]
        entries.append("\n".join(lines_out))
    return "\n\n".join(entries)
