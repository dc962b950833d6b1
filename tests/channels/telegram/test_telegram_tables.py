"""Markdown tables in a reply: readable on a phone, in Telegram, which has none."""

from __future__ import annotations

from bot.bench.fakes.telegram_api import FakeTelegramServer, parse_telegram_html
from bot.events import OutboundMessage
from channels.telegram.adapter import TelegramChannel
from channels.telegram.render import markdown_to_html
from channels.telegram.splitting import html_to_plain

from .conftest import OWNER_ID

NARROW = "| Name | Age | City |\n|---|---:|:---|\n| **Ann** | 30 | Köln |\n| Bo <x> & | 5 | 東京 |"


def test_a_narrow_table_is_an_aligned_monospace_block() -> None:
    html = markdown_to_html(f"Here:\n\n{NARROW}\n\nbye")
    parse_telegram_html(html)  # Telegram takes it
    assert html.startswith("Here:\n\n<pre>") and html.endswith("</pre>\n\nbye")
    # Before, the raw pipes and a line of dashes, nothing lined up in the phone's font;
    # its emphasis markers go (a code block shows them as typed), wide characters count 2.
    assert html_to_plain(html).splitlines()[2:6] == [
        "Name     │ Age │ City",
        "─────────┼─────┼─────",
        "Ann      │  30 │ Köln",
        "Bo <x> & │   5 │ 東京",
    ]


def test_a_table_too_wide_for_a_phone_is_an_entry_per_row() -> None:
    table = (
        "| Model | Context window | Price per million input tokens | Notes |\n"
        "|---|---|---|---|\n"
        "| **Opus** | 200k | $15 | best [docs](https://x.io/a) |\n"
        "| Haiku | 200k | | fast `x<y` |"
    )
    html = markdown_to_html(table)
    parse_telegram_html(html)
    assert html == (
        "<b>Opus</b>\n  Context window: 200k\n  Price per million input tokens: $15\n"
        '  Notes: best <a href="https://x.io/a">docs</a>\n\n'
        "<b>Haiku</b>\n  Context window: 200k\n  Notes: fast <code>x&lt;y</code>"
    )


def test_pipes_that_make_no_table_stay_as_they_were() -> None:
    text = "a | b\nnot a table\n| x |\n|---|---|\n```\n| c | d |\n|---|---|\n```"
    html = markdown_to_html(text)
    assert html_to_plain(html) == "a | b\nnot a table\n| x |\n|---|---|\n| c | d |\n|---|---|"


async def test_a_table_longer_than_a_message_arrives_whole_once_in_order(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    rows = "\n".join(f"| {i} | r{i} <&> |" for i in range(700))
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), f"| n | v |\n|--|--|\n{rows}"))
    sent = tg_server.sent_to(OWNER_ID)
    assert len(sent) > 1 and all(m["parse_mode"] == "HTML" for m in sent)  # no fallback
    lines = "\n".join(m["text"] for m in sent).splitlines()
    assert [ln.split(" │ ")[1] for ln in lines[2:]] == [f"r{i} <&>" for i in range(700)]


def test_a_wide_tables_column_without_a_name_shows_its_cells_alone() -> None:
    table = "| Name | | Notes on each |\n|---|---|---|\n| Ann | from the office upstairs | ok |"
    assert markdown_to_html(table) == (
        "<b>Ann</b>\n  from the office upstairs\n  Notes on each: ok"
    )


def test_a_table_of_more_than_64_columns_is_text() -> None:
    # the shared reader's limit (channels/markdown_blocks.py), as on the dashboard
    header = "|" + "|".join("c" for _ in range(65)) + "|"
    rule = "|" + "|".join("-" for _ in range(65)) + "|"
    assert markdown_to_html(f"{header}\n{rule}") == f"{header}\n{rule}"
