"""The Markdown reader over deep nesting and long lines: the same output as before on
the nested spans, and work that grows with the text, not with its square (or cube).

A model's answer may be 256 KiB. A heading of one word and 1,000 spaces took 7 s to
read (its pattern was cubic over the spaces), a fence's or a row of dashes' trailing
spaces were quadratic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from channels.markdown_blocks import blocks, render_inline


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("*" * 3 + "x" + "*" * 3, "<b>*x</b>*"),
        ("**_**_x_**_**", "<b>_</b><i>x</i><b>_</b>"),
        ("*a *b* c*", "<i>a <i>b</i> c</i>"),
        ("*a **b _c ~~d~~ c_ b** a*", "<i>a <b>b <i>c <s>d</s> c</i> b</b> a</i>"),
        ("*a " * 3 + "b* " * 3, "<i>a <i>a <i>a b</i> b</i> b</i> "),
        ("**a *b c**", "<b>a *b c</b>"),  # an opener left open inside stays text
        ("** **", "** **"),
        ("****", "****"),
        ("[[[x]]]", "[[[x]]]"),
        ("[*a*](https://e.x/(b)) *c*", '<a href="https://e.x/(b)"><i>a</i></a> <i>c</i>'),
        ("``a`b`` `c` ```d", "<code>a`b</code> <code>c</code> ```d"),
        ("`a ``b`` c", "`a <code>b</code> c"),
    ],
)
def test_nested_spans(text: str, html: str) -> None:
    assert render_inline(text) == html


@pytest.mark.parametrize(
    ("line", "kind", "text"),
    [
        ("## Plan ##", "heading", "Plan"),
        ("# Plan   ", "heading", "Plan"),
        ("### ###", "heading", ""),
        # Regression: the closing #s were read off a word ("Learning C").
        ("# Learning C#", "heading", "Learning C#"),
        ("```python  ", "code", ""),
        ("```python run", "text", "```python run"),
    ],
)
def test_headings_and_fences(line: str, kind: str, text: str) -> None:
    block = next(blocks(line))
    assert (block.kind, block.text) == (kind, text)


def test_a_row_of_dashes_with_spaces_is_still_a_table() -> None:
    rows = "| a | b |\n| :--- |  ---: |\n| 1 | 2 |"
    assert [b.kind for b in blocks(rows)] == ["table"]
    assert [b.kind for b in blocks("| a | b |\n| --- || --- |")] == ["text", "text"]


# Lines of 512 KiB whose old patterns backtracked over the spaces (a heading: cubic,
# hours; a fence, a row of dashes, a line taken for a table row: quadratic, minutes).
LONG = 512 * 1024
LONG_LINES = {
    "heading": f"# a{' ' * LONG}x",
    "fence": f"```{' ' * LONG}!",
    "dashes": f"| a |\n-{' ' * LONG}x",
    "dashes-cells": f"| a |\n| --- {' ' * LONG}x",
    "spaces": f"{' ' * LONG}\nnext",  # taken for a table row: "|" in it?
}


@pytest.mark.parametrize("name", sorted(LONG_LINES))
def test_a_long_line_is_read_in_one_pass(name: str) -> None:
    # In a child process with a generous bound: reading one takes milliseconds now, and
    # the old patterns ran for minutes to hours (a regex cannot be interrupted in-process).
    code = (
        "import sys; sys.path[:0] = sys.argv[2:]\n"
        "from channels.markdown_blocks import blocks, render_inline\n"
        "from tests.channels.test_markdown_nesting import LONG_LINES\n"
        "for block in blocks(LONG_LINES[sys.argv[1]]):\n"
        "    render_inline(block.text)\n"
    )
    try:
        subprocess.run([sys.executable, "-c", code, name, *sys.path], check=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the {name} line of {LONG} characters took over a minute")
