"""Markdown -> Telegram HTML and splitting, checked with the fake server's strict parser."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.bench.fakes.telegram_api import HtmlError, parse_telegram_html
from bot.graphemes import boundary_before
from channels.telegram.render import (
    MIN_SPLIT_LIMIT,
    TELEGRAM_LIMIT,
    escape,
    html_to_plain,
    markdown_to_html,
    render_parts,
    split_html,
    split_visible,
    utf16_len,
)

HOSTILE = [
    "<script>alert(1)</script>",
    "<b>unclosed",
    "</i> stray end",
    "&amp; &lt; & &#x41; &bogus;",
    "[x](javascript:alert(1))",
    '[x](https://ok.example/"><script>)',
    "**a *b** c*",
    "` unclosed code",
    "```\nunclosed <fence>",
    "> <i>quote\n> more",
    "<a href='x'>link</a>",
    "_*__**~~mixed~~**__*_",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_renders_to_html_telegram_accepts(text: str) -> None:
    rendered = markdown_to_html(text)
    visible = parse_telegram_html(rendered)  # raises if Telegram would refuse it
    # every letter the model wrote is still visible, nothing became a tag
    letters = re.sub(r"[^A-Za-z0-9]", "", text.replace("javascript", "javascript"))
    assert re.sub(r"[^A-Za-z0-9]", "", visible).startswith(letters[:5])


def test_script_tags_are_escaped_not_interpreted() -> None:
    rendered = markdown_to_html("<script>alert(1)</script> and <b>unclosed")
    assert "<script>" not in rendered and "<b>unclosed" not in rendered
    assert "&lt;script&gt;" in rendered
    assert parse_telegram_html(rendered) == "<script>alert(1)</script> and <b>unclosed"


def test_entities_from_the_model_are_shown_literally() -> None:
    assert parse_telegram_html(markdown_to_html("&amp; & <")) == "&amp; & <"


def test_only_http_links_become_anchors() -> None:
    assert markdown_to_html("[x](javascript:alert(1))") == "[x](javascript:alert(1))"
    assert markdown_to_html("[docs](https://a.example/?q=1&r=2)") == (
        '<a href="https://a.example/?q=1&amp;r=2">docs</a>'
    )
    assert "<a" not in markdown_to_html("[x](data:text/html,hi)")
    assert markdown_to_html("[w](https://en.wikipedia.org/wiki/Foo_(bar)) end") == (
        '<a href="https://en.wikipedia.org/wiki/Foo_(bar)">w</a> end'
    )


def test_markdown_subset() -> None:
    html = markdown_to_html(
        "# Plan\n**bold** *it* _it2_ ~~gone~~ `a<b` snake_case_name\n"
        "- item\n> quoted\n```python\nx = '<y>'\n```"
    )
    assert html.splitlines()[0] == "<b>Plan</b>"
    assert (
        "<b>bold</b> <i>it</i> <i>it2</i> <s>gone</s> <code>a&lt;b</code> snake_case_name" in html
    )
    assert "• item" in html
    assert "<blockquote>quoted</blockquote>" in html
    assert "<pre><code class=\"language-python\">x = '&lt;y&gt;'</code></pre>" in html
    parse_telegram_html(html)


def test_a_code_block_inside_a_list_item_stays_code() -> None:
    # Regression: a fence indented by four spaces (the model's code block inside a
    # numbered step) was taken for text, its code read as Markdown: "a*b*c" lost its
    # asterisks to italics, and the command the owner copied was not the one written.
    html = markdown_to_html(
        "1. Install:\n    ```bash\n    pip install a_b *x*\n      --flag\n    ```\n2. Done"
    )
    assert html == (
        '1. Install:\n<pre><code class="language-bash">pip install a_b *x*\n  --flag'
        "</code></pre>\n2. Done"
    )
    # and words after a closing fence are kept (they were dropped with it)
    assert markdown_to_html("```\nls\n``` then *run* it") == "<pre>ls</pre>\nthen <i>run</i> it"


def test_ten_thousand_character_reply_is_split_in_order() -> None:
    paragraphs = [f"Paragraph {i}: " + " ".join(f"w{i}_{j}" for j in range(60)) for i in range(40)]
    text = "\n\n".join(paragraphs)[:10_000]
    parts = render_parts(text)
    assert len(parts) == 3
    assert all(utf16_len(p) <= TELEGRAM_LIMIT for p in parts)
    visible = [parse_telegram_html(p) for p in parts]
    # cut on paragraph boundaries: every part ends a paragraph, the next starts one
    assert all(v.startswith("Paragraph ") for v in visible)
    assert " ".join(" ".join(visible).split()) == " ".join(text.split())


def test_split_never_breaks_tags_and_reopens_them() -> None:
    text = "**" + " ".join(["bold"] * 3000) + "**"
    parts = render_parts(text)
    assert len(parts) >= 3
    for part in parts:
        assert part.startswith("<b>") and part.endswith("</b>")
        parse_telegram_html(part)


def test_split_inside_code_block_and_entities() -> None:
    text = "```\n" + "x <&> y\n" * 1500 + "```"
    parts = render_parts(text)
    for part in parts:
        assert part.startswith("<pre>") and part.endswith("</pre>")
        assert utf16_len(html_to_plain(part)) <= TELEGRAM_LIMIT  # as Telegram counts
        parse_telegram_html(part)
    amp = split_html("&amp;" * 2000, limit=100)
    assert all(p.count("&") == p.count("&amp;") for p in amp)


def test_code_split_across_parts_keeps_the_indentation_of_each_line() -> None:
    lines = ["def f(x):"] + [f"    if x == {i}:\n        return {i}" for i in range(400)]
    code = "\n".join(lines)
    parts = render_parts(f"Here it is:\n\n```python\n{code}\n```")
    assert len(parts) >= 3
    shown = [parse_telegram_html(p) for p in parts]
    # every part after the first starts a line of code with its own indentation
    for text in shown[1:]:
        assert text.startswith("    "), text[:40]
    # read back part after part, the code is the same, line for line
    assert "\n".join(shown).split("\n")[2:] == code.split("\n")


def test_a_link_too_long_for_any_part_is_kept_as_its_words() -> None:
    # A link whose escaped address alone passes the limit (each "&" of a tracking URL
    # becomes "&amp;"): its tag was put in a part whose end did not close it, and the
    # next part closed a tag it never opened; Telegram refused both.
    url = "https://t.example/?" + "a&&&" * 495
    assert len(url) <= 2000 and utf16_len(markdown_to_html(f"[x]({url})")) > TELEGRAM_LIMIT
    parts = render_parts(f"See [the booking page]({url}) and **call** them.")
    shown = [parse_telegram_html(p) for p in parts]  # raises on what Telegram refuses
    assert " ".join(shown).split() == "See the booking page and call them.".split()
    assert all(utf16_len(html_to_plain(p)) <= TELEGRAM_LIMIT for p in parts)
    # cut by the markup (as before session 17), the link still gives way to its words
    cut = split_html(markdown_to_html(f"See [the booking page]({url}) and **call** them."))
    assert all(utf16_len(p) <= TELEGRAM_LIMIT for p in cut)
    assert " ".join(parse_telegram_html(p) for p in cut).split() == " ".join(shown).split()


def test_hard_split_counts_utf16_units() -> None:
    parts = render_parts("😀" * 5000)
    assert [utf16_len(p) for p in parts] == [4096, 4096, 1808]


def test_empty_text_gives_no_parts() -> None:
    assert render_parts("   \n\n  ") == []


def test_plain_fallback_strips_tags() -> None:
    assert html_to_plain("<b>a &lt;b&gt;</b>") == "a <b>"


def test_fake_parser_is_strict() -> None:
    for bad in ("<b>x", "<script>x</script>", "a & b", "<b><i>x</b></i>", "1 < 2"):
        with pytest.raises(HtmlError):
            parse_telegram_html(bad)


markdownish = st.lists(
    st.sampled_from([*"ab c*_~`[]()<>&#>-\n/:.😀", "http://x.y", "**", "```", "\n\n"]),
    max_size=200,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(markdownish, st.integers(min_value=40, max_value=300))
def test_any_markdown_renders_and_splits_into_valid_parts(text: str, limit: int) -> None:
    html = markdown_to_html(text)
    visible = parse_telegram_html(html)
    parts = split_html(html, limit)
    joined = ""
    for part in parts:
        assert utf16_len(part) <= limit
        joined += parse_telegram_html(part)
    # only whitespace may be lost at the cuts; the characters keep their order
    assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", visible)


@settings(max_examples=400, deadline=None)
@given(markdownish, st.integers(min_value=MIN_SPLIT_LIMIT, max_value=40))
def test_split_at_tiny_limits_never_passes_the_limit_nor_loses_text(text: str, limit: int) -> None:
    # Before, a part was cut anyway when the tags to reopen and close left no room for a
    # character, or a character was spelt longer than the limit: it passed the limit.
    html = markdown_to_html(text)
    parts = split_html(html, limit)
    assert all(utf16_len(p) <= limit for p in parts), parts
    joined = "".join(parse_telegram_html(p) for p in parts)
    assert re.sub(r"\s", "", joined) == re.sub(r"\s", "", parse_telegram_html(html))


def test_split_at_tiny_limits_keeps_the_words_without_their_tags() -> None:
    parts = split_html("<b>bold</b> &#x1F600; <i>x</i>", 7)
    assert all(utf16_len(p) <= 7 for p in parts), parts
    # (the spaces at the cuts are the message boundaries)
    assert "".join(parse_telegram_html(p) for p in parts) == "bold😀x"
    assert split_html("<b><i>ab</i></b>", 9) == ["<b>ab</b>"]  # the inner tag gives way
    with pytest.raises(ValueError):
        split_html("&amp;&amp;", MIN_SPLIT_LIMIT - 1)  # "&amp;" alone passes it


def test_parts_are_cut_by_what_telegram_counts_not_by_the_markup() -> None:
    # Telegram's 4,096 is counted after entity parsing: "&lt;" is one character, a tag
    # none. Cut by the markup's length, HTML code went out in four or five messages.
    code = "<div class='x'>&amp;</div>\n" * 140  # 3,780 characters, 5,460 escaped
    parts = render_parts(f"```html\n{code}```")
    assert len(parts) == 1
    assert html_to_plain(parts[0]).strip() == code.strip()
    long = "a < b && c > d\n" * 1000  # 15,000 characters, 30,000 escaped
    parts = split_visible(escape(long))
    assert len(parts) == 4
    assert all(utf16_len(html_to_plain(p)) <= TELEGRAM_LIMIT for p in parts)
    assert " ".join(html_to_plain(p) for p in parts).split() == long.split()
    assert split_visible("") == [] and split_visible("&lt;") == ["&lt;"]


def test_a_hard_split_falls_between_characters() -> None:
    # Regression: a run without spaces was cut by UTF-16 units wherever the limit fell:
    # a part ended in "man + ZWJ" and the next began with "woman + girl", a Devanagari
    # consonant went without its vowel sign.
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 8 UTF-16 units
    parts = split_html(family * 30, 100)
    assert all(p == family * (len(p) // len(family)) for p in parts)
    assert all(utf16_len(p) <= 100 for p in parts) and "".join(parts) == family * 30
    hindi = "ab" + "क्षत्रिय" * 30
    parts = split_html(hindi, 50)
    assert "".join(parts) == hindi
    assert all(
        boundary_before(hindi, len("".join(parts[: i + 1]))) == len("".join(parts[: i + 1]))
        for i in range(len(parts))
    )
    flags = "\U0001f1eb\U0001f1f7" * 40  # each flag: 4 units
    assert all(len(p) % 2 == 0 for p in split_html(flags, 50))


def test_deeply_nested_emphasis_is_split_in_linear_work_and_few_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression (session 30): the open elements were copied at each tag and their
    # closing tags joined again at every character, so the split's work grew with the
    # nesting times the length (8 KiB of nested emphasis 7 s, 16 KiB 234 s: a reply
    # that hung its chat); and once the reopened tags filled most of a part, each part
    # held a few characters (2,394 messages for 16 KiB). The work is counted as the
    # characters measured, not timed.
    import channels.telegram.splitting as splitting

    measured = 0
    measure = splitting.utf16_len

    def counting(text: str) -> int:
        nonlocal measured
        measured += len(text)
        return measure(text)

    monkeypatch.setattr(splitting, "utf16_len", counting)
    html = markdown_to_html("*a " * 1400 + "b* " * 1400)
    assert html.count("<i>") == 1400
    parts = split_visible(html)
    assert measured < 20 * len(html), measured  # before: ~1,500 times its length
    assert len(parts) <= 3

    deeper = markdown_to_html("**a " * 2800 + "b** " * 2800)
    parts = split_visible(deeper)
    assert all(utf16_len(parse_telegram_html(p)) <= 4096 for p in parts)
    assert len(parts) <= 5  # 11,200 characters shown: 3 parts at least
    joined = "".join(parse_telegram_html(p) for p in parts)
    assert re.sub(r"\s", "", joined) == "a" * 2800 + "b" * 2800  # the words, in order
