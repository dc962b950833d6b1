"""The HTML part of the mail we send: the answer's Markdown as Gmail, Outlook and Apple
Mail show it.

The model writes Markdown; sent as text/plain alone, the owner read its raw asterisks,
pipes and backticks. The mail now carries the text as it was (text/plain, for clients
and filters that read text) and this rendering of it (text/html), read by
:mod:`channels.markdown_blocks` as Telegram reads it. Nothing passes through as HTML:
every character of the model's text (and of a third party's, quoted in an escalation)
is escaped, links go to http(s) and mailto only, never in a quote (someone else's
words: a link's label could name another address than the one it opens), and no image
is ever shown (``![x](url)`` stays a link). What Telegram sends as written (an
escalation, a command's answer, a readout the core marks ``plain``) is shown as written
here too, in the same style, nothing read as Markdown. Styles are inline, which every client
keeps (Gmail drops most ``<style>`` sheets, Outlook's Word engine many rules); code
wraps its long lines rather than widening the mail. Every block of text (paragraph,
heading, quote, list and item, table) has ``dir="auto"``: an answer in Hebrew or Arabic
is set right to left, each paragraph by its own first letter (session 41), and a
table's header cells at the side its first letter starts from (session 42).

The rendering is bounded (:func:`html_body` is None for a text too long for it, or
when the HTML would be much larger than the text) and depends on the text alone, so
an answer the outbox retries after a restart is the same mail.
"""

from __future__ import annotations

import unicodedata

from channels.markdown_blocks import Block, blocks, cells, escape, render_inline, right_aligned

# Longer answers go as text alone: their HTML would double a big mail for little gain.
MAX_HTML_SOURCE = 256 * 1024
# The HTML may be this much larger than its text, styles and tags included.
_GROWTH = 4
_SLACK = 16 * 1024

# No colour for the text: a client in dark mode shows it light on dark. Where a
# background is set (code), the text's colour is set with it, or dark mode put light
# text on the light grey.
_BODY = "font-family:Arial,Helvetica,sans-serif;font-size:14px;line-height:1.45"
_P = "margin:0 0 10px 0"
_PRE = (
    "margin:0 0 10px 0;padding:8px 10px;background:#f4f4f4;color:#202124;border:1px solid #e0e0e0;"
    "font-family:Consolas,Menlo,monospace;font-size:13px;"
    "white-space:pre-wrap;word-wrap:break-word;overflow-wrap:anywhere"
)
_QUOTE = "margin:0 0 10px 0;padding:0 0 0 10px;border-left:3px solid #c8c8c8;color:#6b6b6b"
# The table's borders and padding as attributes, which every client honours (Outlook
# too) and which cost a cell nothing: a cell with a style of its own made a table of
# short cells many times its text.
_TABLE = (
    '<table dir="auto" border="1" cellspacing="0" cellpadding="5" '
    'style="border-collapse:collapse;border-color:#c8c8c8;margin:0 0 10px 0">'
)
_HEADINGS = {1: "font-size:20px", 2: "font-size:17px", 3: "font-size:15px"}
_RULE = "border:none;border-top:1px solid #c8c8c8;margin:12px 0"
_LIST = "margin:0 0 10px 0;padding-left:24px"
_CODE = "font-family:Consolas,Menlo,monospace;background:#f4f4f4;color:#202124;padding:0 3px"
# Each block takes its direction from its own first strong letter (session 41: without
# it, an answer in Hebrew or Arabic was set left to right, its punctuation and the
# English words in it out of place): a paragraph in Hebrew right-aligned, the English
# one after it left (HTML5's dir="auto", which clients that render with a browser
# engine honour; one that ignores it shows the mail as before). Code stays left to right.
_DIR = ' dir="auto"'


def _inline(text: str, links: bool = True) -> str:
    html = render_inline(text, links=links, mailto=True)
    return html.replace("<code>", f'<code style="{_CODE}">')


def _right_to_left(texts: list[list[str]]) -> bool:
    """Whether ``dir="auto"`` sets a table of these cells right to left: its first
    strong letter (in document order, as a browser finds it) is Hebrew, Arabic..."""
    for row in texts:
        for cell in row:
            for ch in cell:
                kind = unicodedata.bidirectional(ch)
                if kind == "L":
                    return False
                if kind in ("R", "AL"):
                    return True
    return False


def _table(rows: tuple[str, ...]) -> str:
    header = cells(rows[0])
    right = right_aligned(rows[1])
    lines = [(cells(line) + [""] * len(header))[: len(header)] for line in (rows[0], *rows[2:])]
    # A header cell is centred unless told (Gmail, Outlook): set over its column at the
    # side the text starts from, the table's own direction as dir="auto" finds it (the
    # align attribute every client honours; "start" is no value of it). Before session
    # 42 it was left in a Hebrew or Arabic table too, its cells below at the right.
    start = ' align="right"' if _right_to_left(lines) else ' align="left"'
    out = [_TABLE]
    for n, row in enumerate(lines):
        tag = "th" if n == 0 else "td"
        out.append("<tr>")
        for k, cell in enumerate(row):
            align = ' align="right"' if right[k] else start if n == 0 else ""
            out.append(f"<{tag}{align}>{_inline(cell)}</{tag}>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _list(items: list[Block]) -> str:
    """Consecutive list items as lists, nested where an item is indented further."""
    out: list[str] = []
    open_lists: list[tuple[int, str]] = []  # (indentation, "ul" | "ol")
    for item in items:
        depth = len(item.indent.expandtabs(4))
        tag = "ol" if item.kind == "numbered" else "ul"
        while open_lists and depth < open_lists[-1][0]:
            out.append(f"</li></{open_lists.pop()[1]}>")
        if open_lists and depth == open_lists[-1][0] and tag != open_lists[-1][1]:
            out.append(f"</li></{open_lists.pop()[1]}>")
        if not open_lists or depth > open_lists[-1][0]:
            open_lists.append((depth, tag))
            # a list the model numbers on after a paragraph ("3. ...") counts on from it
            start = f' start="{item.level}"' if tag == "ol" and item.level != 1 else ""
            out.append(f'<{tag}{start}{_DIR} style="{_LIST}"><li{_DIR}>')
        else:
            out.append(f"</li><li{_DIR}>")
        out.append(_inline(item.text))
    while open_lists:
        out.append(f"</li></{open_lists.pop()[1]}>")
    return "".join(out)


def _block(kind: str, group: list[Block]) -> str:
    """The HTML of a run of blocks of one ``kind`` (list items, quote or text lines)."""
    if kind == "list":
        return _list(group)
    if kind == "quote":
        lines = "<br>".join(_inline(b.text, links=False) for b in group)
        return f'<blockquote{_DIR} style="{_QUOTE}">{lines}</blockquote>'
    if kind == "text":
        return f'<p{_DIR} style="{_P}">' + "<br>".join(_inline(b.text) for b in group) + "</p>"
    block = group[0]  # the others come one at a time
    if kind == "code":
        return f'<pre dir="ltr" style="{_PRE}">{escape(block.text)}</pre>'
    if kind == "table":
        return _table(block.rows)
    if kind == "heading":
        size = _HEADINGS.get(block.level, "font-size:14px")
        return f'<p{_DIR} style="{_P};{size};font-weight:bold">{_inline(block.text)}</p>'
    return f'<hr style="{_RULE}">'  # a rule


def _runs(markdown: str) -> list[tuple[str, list[Block]]]:
    """The blocks of ``markdown`` with consecutive list items, quote lines and text lines
    (a paragraph) each gathered; blank lines end a run and are dropped."""
    runs: list[tuple[str, list[Block]]] = []
    for block in blocks(markdown):
        kind = "list" if block.kind in ("bullet", "numbered") else block.kind
        if kind == "text" and not block.text.strip():
            runs.append(("blank", []))
            continue
        if runs and runs[-1][0] == kind and kind in ("list", "quote", "text"):
            runs[-1][1].append(block)
        else:
            runs.append((kind, [block]))
    return [(kind, group) for kind, group in runs if kind != "blank"]


def _literal(text: str) -> list[str]:
    """``text`` as written: its paragraphs, each line as it is (a leading indentation
    kept), nothing read as Markdown."""
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    return [
        f'<p{_DIR} style="{_P}">'
        + "<br>".join(
            "&nbsp;" * (len(line) - len(line.lstrip(" "))) + escape(line.lstrip(" "))
            for line in paragraph.strip("\n").split("\n")
        )
        + "</p>"
        for paragraph in paragraphs
    ]


def html_body(markdown: str, *, literal: bool = False) -> str | None:
    """The HTML document showing ``markdown``, or None when it goes as text alone (longer
    than :data:`MAX_HTML_SOURCE`, or its HTML would be much larger than the text).
    ``literal``: the text is shown as written, not read as Markdown (an escalation
    quoting a stranger, a command's answer quoting stored text, as on Telegram)."""
    if len(markdown) > MAX_HTML_SOURCE:
        return None
    if literal:
        parts = _literal(markdown)
    else:
        parts = [_block(kind, group) for kind, group in _runs(markdown)]
    html = (
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Type" '
        'content="text/html; charset=utf-8"></head>'
        f'<body><div{_DIR} style="{_BODY}">\n' + "\n".join(parts) + "\n</div></body></html>\n"
    )
    return html if len(html) <= _GROWTH * len(markdown) + _SLACK else None
