"""The Markdown reader Telegram and e-mail share (channels/markdown_blocks.py)."""

from __future__ import annotations

from channels.markdown_blocks import MAX_COLUMNS, blocks, find_table, render_inline


def test_the_blocks_of_an_answer() -> None:
    text = (
        "# Plan\n"
        "Some **words**.\n"
        "\n"
        "- one\n"
        "  - nested\n"
        "2. second\n"
        "> quoted\n"
        "---\n"
        "| a | b |\n"
        "|---|--:|\n"
        "| 1 | 2 |\n"
        "    ```sh\n"
        "    ls *.py\n"
        "    ``` then run it"
    )
    found = [(b.kind, b.text) for b in blocks(text)]
    assert found == [
        ("heading", "Plan"),
        ("text", "Some **words**."),
        ("text", ""),
        ("bullet", "one"),
        ("bullet", "nested"),
        ("numbered", "second"),
        ("quote", "quoted"),
        ("rule", ""),
        ("table", ""),
        ("code", "ls *.py"),
        ("text", "then run it"),
    ]
    parsed = list(blocks(text))
    assert parsed[0].level == 1 and parsed[4].indent == "  " and parsed[9].lang == "sh"
    assert parsed[8].rows == ("| a | b |", "|---|--:|", "| 1 | 2 |")
    assert parsed[5].line == "2. second"  # Telegram shows the number as written
    assert parsed[5].level == 2


def test_inline_spans_escape_everything_and_links_only_to_safe_schemes() -> None:
    assert render_inline("**b** *i* ~~s~~ `a<b` <script>") == (
        "<b>b</b> <i>i</i> <s>s</s> <code>a&lt;b</code> &lt;script&gt;"
    )
    assert render_inline("[x](javascript:alert(1))") == "[x](javascript:alert(1))"
    assert render_inline("[me](mailto:me@example.org)") == "[me](mailto:me@example.org)"
    assert render_inline("[me](mailto:me@example.org)", mailto=True) == (
        '<a href="mailto:me@example.org">me</a>'
    )
    assert render_inline('[q](https://a.example/?a=1&b="2")') == (
        '<a href="https://a.example/?a=1&amp;b=&quot;2&quot;">q</a>'
    )


def test_a_table_of_too_many_columns_is_text() -> None:
    wide = "|" * (MAX_COLUMNS + 2)
    assert find_table([wide, "|" + "-|" * (MAX_COLUMNS + 1)], 0) == 0
    assert find_table(["| a | b |", "|---|---|", "| 1 | 2 |", ""], 0) == 3
