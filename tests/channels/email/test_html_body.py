"""The HTML part of our mail (channels/email/html_body.py): the answer's Markdown as a
mail client shows it, escaped, without remote content, bounded in size."""

from __future__ import annotations

import re
from email.message import EmailMessage
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.email.compose import compose
from channels.email.html_body import MAX_HTML_SOURCE, html_body

ANSWER = """# Lisbon, 3 nights

Here is the **plan** for *May*:

1. Fly out on the 3rd
2. Check in at `Hotel Avenida`
   - breakfast included
   - late check-out
- pack light

| Day | Cost |
|-----|-----:|
| Fri | 120 € |
| Sat | 95 € |

```python
print("a very long line " * 20)
```

> The hotel wrote: [confirm here](https://evil.example/login)

See [the booking](https://booking.example/r?id=1&x=2) or [mail me](mailto:me@example.org).
"""


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


HEBREW = """# תוכנית לליסבון

שלום! הנה **התוכנית** ל-May:

1. טיסה ב-3
   - ארוחת בוקר
- מזוודה קלה

| יום | עלות |
|-----|-----:|
| ו׳ | 120 € |

```
ssh lisbon.example
```

> המלון כתב: confirm here

And a line in English, set left to right.
"""

# the elements a block of text is written in (a paragraph, a heading, a quote, a list
# and its items, a table, the whole body)
_TEXT_BLOCKS = {"div", "p", "blockquote", "ul", "ol", "li", "table"}


def test_every_text_block_takes_its_own_direction() -> None:
    # Regression (session 41): no dir attribute anywhere, and an answer in Hebrew or
    # Arabic was set left to right, its punctuation and English words out of place.
    for text, literal in ((HEBREW, False), (HEBREW, True), ("مرحبا، كيف حالك؟", False)):
        html = html_body(text, literal=literal)
        assert html is not None
        parsed = _parse(html)
        blocks = [(tag, attrs) for tag, attrs in parsed.tags if tag in _TEXT_BLOCKS]
        assert blocks and all(attrs.get("dir") == "auto" for _, attrs in blocks), blocks
        # code reads left to right whatever the text around it
        assert all(attrs.get("dir") == "ltr" for tag, attrs in parsed.tags if tag == "pre")
    tags = {tag for tag, _ in _parse(html_body(HEBREW) or "").tags}
    assert {"p", "blockquote", "ol", "ul", "li", "table", "pre"} <= tags


def _header_aligns(text: str) -> list[str | None]:
    return [a.get("align") for t, a in _parse(html_body(text) or "").tags if t == "th"]


def test_a_tables_header_cells_start_at_the_tables_own_side() -> None:
    # Regression (session 42): a header cell was align="left" in a Hebrew or Arabic table
    # too (dir="auto" set it right to left, its cells below at the right).
    assert _header_aligns(HEBREW) == ["right", "right"]  # the second column: ---:
    assert _header_aligns("| שם | עיר |\n|---|---|\n| דנה | Tel Aviv |") == ["right", "right"]
    assert _header_aligns("| الاسم | المدينة |\n|---|---|\n| Ali | Cairo |") == ["right"] * 2
    # the table's first strong letter decides, as dir="auto" does: an English header
    # over Hebrew cells is a left-to-right table, numbers and marks decide nothing
    assert _header_aligns("| Name | City |\n|---|---|\n| דנה | תל אביב |") == ["left", "left"]
    assert _header_aligns("| # | 2026 |\n|---|---|\n| 1 | שלום |") == ["right", "right"]
    assert _header_aligns("| # | € |\n|---|---:|\n| 1 | 2 |") == ["left", "right"]


def test_an_answer_in_markdown_reads_as_formatted_mail() -> None:
    html = html_body(ANSWER)
    assert html is not None
    parsed = _parse(html)
    names = [tag for tag, _ in parsed.tags]
    assert {"ol", "ul", "li", "table", "th", "td", "pre", "blockquote", "b", "i", "code"} <= set(
        names
    )
    assert names.index("ol") < names.index("ul")  # the nested list is inside the numbered
    assert '<ol start="3"' in (html_body("Then:\n\n3. three\n4. four") or "")
    assert "**" not in html and "|-----|" not in html and "```" not in html
    # the amounts column is right-aligned, as its row of dashes says
    assert [a.get("align") for t, a in parsed.tags if t == "td"][:2] == [None, "right"]
    assert [a.get("align") for t, a in parsed.tags if t == "th"] == ["left", "right"]
    # long code lines wrap instead of widening the mail
    pre = next(a["style"] or "" for t, a in parsed.tags if t == "pre")
    assert "white-space:pre-wrap" in pre
    links = [a["href"] for t, a in parsed.tags if t == "a"]
    assert links == ["https://booking.example/r?id=1&x=2", "mailto:me@example.org"]
    # a link in a quote (someone else's words) stays its text, address and all
    assert "[confirm here](https://evil.example/login)" in "".join(parsed.text)


def test_nothing_from_the_text_passes_as_html() -> None:
    hostile = (
        '<script>alert(1)</script> <img src="https://track.example/p.gif"> '
        "![pixel](https://track.example/p.gif) [x](javascript:alert(1)) "
        '[y](data:text/html,hi) <a href="https://x.example">z</a>\n'
        "> <iframe src=x></iframe>\n"
        "| <b>a</b> | b |\n|---|---|\n| <style>c</style> | d |\n"
        "```\n</pre><script>x()</script>\n```"
    )
    html = html_body(hostile)
    assert html is not None
    tags = {tag for tag, _ in _parse(html).tags}
    assert not tags & {"script", "img", "iframe", "style"}
    hrefs = [a.get("href") for t, a in _parse(html).tags if t == "a"]
    assert hrefs == ["https://track.example/p.gif"]  # "![x](url)" is a link, never an image
    allowed = "html|head|meta|body|div|p|br|a|b|i|s|code|pre|blockquote|table|tr|th|td"
    assert not re.search(rf"<(?!/?({allowed})\b)", html.replace("<!DOCTYPE html>", ""))


def test_the_size_is_bounded() -> None:
    assert html_body("x" * (MAX_HTML_SOURCE + 1)) is None
    # a table of one-character cells would be many times its text: sent as text alone
    table = "|a|b|\n|-|-|\n" + "|1|2|\n" * 20_000
    assert html_body(table) is None
    ordinary = html_body(ANSWER * 50)
    assert ordinary is not None and len(ordinary) < 4 * len(ANSWER * 50) + 16 * 1024


def _mail(text: str, message_id: str | None = "<my-agent.abc@example.com>") -> EmailMessage:
    return compose(
        from_addr="bot@example.com",
        display_name="My Assistant",
        to=["owner@example.org"],
        subject="Re: Trip",
        text=text,
        message_id=message_id,
    ).message


def test_the_mail_is_text_and_html_and_the_same_at_every_retry() -> None:
    def build() -> bytes:
        return re.sub(rb"Date: [^\r\n]*", b"", _mail(ANSWER).as_bytes())

    first, again = build(), build()
    assert first == again  # the boundary too: derived from the Message-ID
    msg = _mail(ANSWER, message_id=None)  # a fresh Message-ID
    assert msg.get_content_type() == "multipart/alternative"
    assert msg.as_string().count("MIME-Version") == 1  # not repeated in the HTML part
    plain = msg.get_body(("plain",))
    html = msg.get_body(("html",))
    assert plain is not None and html is not None
    assert plain.get_content() == ANSWER  # the text as the model wrote it
    assert "<table" in html.get_content()


def test_a_text_naming_our_boundary_gets_another() -> None:
    first = _mail("hello").get_boundary()
    assert first is not None
    second = _mail(f"--{first}\nhello").get_boundary()
    assert second is not None and second != first


def test_a_literal_text_is_shown_as_written() -> None:
    text = "Results for *args:\n\n  1. **not bold** [x](https://a.example)\n<b>x</b>"
    html = html_body(text, literal=True)
    assert html is not None
    assert "*args" in html and "**not bold**" in html and "<a " not in html
    assert "<b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "&nbsp;&nbsp;1. " in html  # an indented line keeps its indentation


_ALLOWED = {"html", "head", "meta", "body", "div", "p", "br", "a", "b", "i", "s", "code"}
_ALLOWED |= {"pre", "blockquote", "table", "tr", "th", "td", "ul", "ol", "li", "hr"}
# pieces of Markdown and HTML, and of links that may or may not be made
_PIECES = [*"ab <>&\"'*_~`[]()|-:#>!\n 1.", "http://x", "mailto:y", "javascript:z", "```"]
_MARKDOWN = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


class _Balance(HTMLParser):
    """Every tag of the HTML, and whether each element closes in the order opened."""

    _VOID = frozenset({"meta", "br", "hr"})

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.seen: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.add(tag)
        self.hrefs += [v or "" for k, v in attrs if k == "href"]
        if tag not in self._VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open.pop() == tag, f"</{tag}> closes nothing open"


@settings(max_examples=300, deadline=None)
@given(_MARKDOWN, st.booleans())
def test_any_text_makes_balanced_html_of_known_tags(text: str, literal: bool) -> None:
    html = html_body(text, literal=literal)
    assert html is not None
    parser = _Balance()
    parser.feed(html.replace("<!DOCTYPE html>", ""))
    parser.close()
    assert parser.open == [] and parser.seen <= _ALLOWED
    assert all(h.startswith(("http://", "https://", "mailto:")) for h in parser.hrefs)
