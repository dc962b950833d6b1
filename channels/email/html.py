"""HTML mail -> readable plain text with the standard library's :mod:`html.parser`.

Block elements become line breaks, list items get a dash, links keep their target, and
``<blockquote>`` content is prefixed with ``> `` so that the quote stripper treats quoted
history in HTML-only mail exactly like quoted history in plain-text mail. Text a mail
client would not show (``display:none``, ``visibility:hidden``, zero font size, the
``hidden`` attribute) is left out: the model reads what the owner sees.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_BLOCK = {
    "p",
    "div",
    "br",
    "tr",
    "table",
    "ul",
    "ol",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "hr",
    "section",
    "article",
    "header",
    "footer",
    "address",
    "dl",
    "dt",
    "dd",
    "center",
}
# Not "head": its end tag is optional (HTML5), and "<head><meta ...><body>" left
# everything skipped; the text a head can hold is in title/style/script, skipped anyway.
_SKIP = {"script", "style", "title", "template", "noscript"}
# Text nobody sees in a mail client (preheaders, and instructions slipped to a model):
# display:none, zero opacity or max-height, the hidden attribute hide an element with
# everything inside it.
_HIDDEN_STYLE = re.compile(
    r"display\s*:\s*none|(opacity|max-height)\s*:\s*0+(\.0*)?(px|pt|em|rem|%)?\s*(;|!|$)",
    re.IGNORECASE,
)
# A zero font size and visibility:hidden are inherited, but an element inside can set
# them back (templates wrap their columns in font-size:0 and size the text inside):
# followed per open element (_TextExtractor._open), not hidden wholesale.
_FONT_SIZE = re.compile(r"(?<![\w-])font-size\s*:\s*([^;!]*)", re.IGNORECASE)
_ZERO_SIZE = re.compile(r"0+(\.0*)?(px|pt|em|rem|%)?\s*$", re.IGNORECASE)
_VISIBILITY = re.compile(r"(?<![\w-])visibility\s*:\s*([a-z]+)", re.IGNORECASE)
# Elements whose end tag may be omitted cannot be followed reliably: never hidden.
_OPTIONAL_END = {"p", "li", "td", "th", "tr", "dt", "dd", "option", "thead", "tbody"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "base", "source"}
_SPACES = re.compile(r"[ \t\r\n\f\u200b\xa0]+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._current: list[str] = []
        self._depth = 0  # blockquote nesting
        self._line_depth = 0
        self._skip = 0
        self._pre = 0
        self._href: str | None = None
        self._link_text: list[str] = []
        self._hidden_tag: str | None = None  # the element hiding what is inside it
        self._hidden_depth = 0
        # open elements (not void, end tag required): (tag, zero font size, invisible)
        self._open: list[tuple[str, bool, bool]] = []
        self._open_count: dict[str, int] = {}  # tag -> entries in _open (an end tag of
        # none is passed over at once: a scan of thousands left open for each, quadratic)

    # -- line assembly -------------------------------------------------------------
    def _flush(self, force_blank: bool = False) -> None:
        text = "".join(self._current)
        if not self._pre:
            text = _SPACES.sub(" ", text).strip()
        prefix = "> " * self._line_depth
        if text:
            for line in text.split("\n"):
                self.lines.append((prefix + line).rstrip())
        elif force_blank and self.lines and self.lines[-1].strip("> "):
            self.lines.append(prefix.rstrip())
        self._current = []
        self._line_depth = self._depth

    def _write(self, data: str) -> None:
        if not self._current:
            self._line_depth = self._depth
        self._current.append(data)

    # -- parser callbacks ----------------------------------------------------------
    def _hides(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        if tag in _OPTIONAL_END or tag in _VOID:
            return False
        values = dict(attrs)
        return "hidden" in values or bool(_HIDDEN_STYLE.search(values.get("style") or ""))

    def _inherited(self, style: str) -> tuple[bool, bool]:
        """(zero font size, invisible) inside an element with ``style``."""
        zero, invisible = self._open[-1][1:] if self._open else (False, False)
        size = _FONT_SIZE.search(style)
        if size:
            zero = bool(_ZERO_SIZE.match(size.group(1).strip()))
        visibility = _VISIBILITY.search(style)
        if visibility:
            invisible = visibility.group(1).lower() in ("hidden", "collapse")
        return zero, invisible

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._hidden_tag is not None:
            if tag == self._hidden_tag:
                self._hidden_depth += 1
            return
        if self._hides(tag, attrs):
            self._hidden_tag, self._hidden_depth = tag, 1
            return
        if tag not in _OPTIONAL_END and tag not in _VOID:
            self._open.append((tag, *self._inherited(dict(attrs).get("style") or "")))
            self._open_count[tag] = self._open_count.get(tag, 0) + 1
        if tag in _SKIP:
            self._skip += 1
            return
        if tag == "blockquote":
            self._flush(force_blank=True)
            self._depth += 1
            self._line_depth = self._depth
            return
        if tag in _BLOCK:
            self._flush(force_blank=tag in ("p", "br", "table", "ul", "ol", "hr", "pre"))
            if tag == "li":
                self._write("- ")
            if tag == "hr":
                self._write("-" * 20)
                self._flush()
            if tag == "pre":
                self._pre += 1
        elif tag in ("td", "th"):
            self._write(" ")
        elif tag == "a":
            self._href = dict(attrs).get("href")
            self._link_text = []
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self._write(f"[{alt}]")

    def handle_endtag(self, tag: str) -> None:
        if self._hidden_tag is not None:
            if tag == self._hidden_tag:
                self._hidden_depth -= 1
                if self._hidden_depth == 0:
                    self._hidden_tag = None
            return
        if self._open_count.get(tag):
            while self._open:  # it, and whatever was left open inside it
                closed = self._open.pop()[0]
                self._open_count[closed] -= 1
                if closed == tag:
                    break
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if tag == "blockquote":
            self._flush()
            self._depth = max(0, self._depth - 1)
            self._line_depth = self._depth
            return
        if tag == "a" and self._href:
            shown = "".join(self._link_text).strip()
            href = self._href
            self._href = None
            if href.startswith(("http://", "https://")) and href not in shown:
                self._write(f" <{href}>")
            return
        if tag in _BLOCK:
            self._flush(force_blank=tag in ("p", "table", "ul", "ol"))
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in ("br", "hr", "img"):
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self._skip or self._hidden_tag is not None:
            return
        if self._open and (self._open[-1][1] or self._open[-1][2]):
            return  # zero-size or invisible, as its element says or inherits
        if self._href is not None:
            self._link_text.append(data)
        self._write(data)

    def text(self) -> str:
        self._flush()
        out: list[str] = []
        for line in self.lines:
            if not line.strip("> ") and out and not out[-1].strip("> "):
                continue  # one blank line at most
            out.append(line)
        return "\n".join(out).strip("\n")


def html_to_text(html: str) -> str:
    """Readable text of an HTML document or fragment. Never raises."""
    parser = _TextExtractor()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # html.parser is lenient; this guards against the unforeseen
        return _SPACES.sub(" ", re.sub(r"<[^>]*>", " ", html)).strip()
    return parser.text()
