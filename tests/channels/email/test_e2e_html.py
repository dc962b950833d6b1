"""End to end, what the owner's mail client shows: the answer's Markdown as HTML beside
its text (channels/email/html_body.py), the same mail when the outbox retries it after
a restart, and a stranger's words in an escalation shown, never obeyed, as HTML."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from bot.events import OutboundMessage
from tests.channels.email.conftest import PymapServer, SmtpServer, append
from tests.channels.email.helpers import text_of
from tests.channels.email.stack import (
    OWNER,
    Stack,
    open_in_new_folder,
    owner_mail,
    start_again,
    stop_stack,
)

ANSWER = (
    "**Booked**: 3 nights.\n\n"
    "| Day | Cost |\n|---|---:|\n| Fri | 120 € |\n\n"
    "```\nssh lisbon.example 'cat booking.txt'\n```\n"
    "- [the hotel](https://hotel.example/r?a=1&b=2)\n"
)


def _without_date(raw: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r\n]*", b"", raw)


async def test_a_markdown_answer_is_text_and_html_and_the_same_mail_after_a_restart(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    _, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    # Every attempt is taken and the connection dropped before the server's answer:
    # the sender cannot know it went out, and sends it again, after the restart too.
    smtp.capture.hang_up_after_data = 1000
    await stack.services.outbox.enqueue(
        OutboundMessage(channel="email", chat_id=OWNER, text=ANSWER, kind="notice"),
        dedup_key="test:html:1",
    )
    await smtp.capture.wait_for(1)
    await stop_stack(stack, stacks)
    before = len(smtp.capture.messages)
    smtp.capture.hang_up_after_data = 0
    await start_again(stack, stacks)
    await smtp.capture.wait_for(before + 1)
    (_, first), (_, last) = smtp.capture.messages[0], smtp.capture.messages[-1]
    raw_first = smtp.capture.messages[0][0].original_content or b""
    raw_last = smtp.capture.messages[-1][0].original_content or b""
    assert first["Message-ID"] == last["Message-ID"]
    # the same mail, MIME boundary and all (only the Date is the retry's own)
    assert _without_date(raw_first) == _without_date(raw_last)
    assert last.get_content_type() == "multipart/alternative"
    assert (
        text_of(last).replace("\r\n", "\n") == ANSWER
    )  # the text as written, for text-only readers
    html_part = last.get_body(("html",))
    assert html_part is not None
    html = str(html_part.get_content())
    assert "<b>Booked</b>" in html and "**" not in html
    assert '<td align="right">120 €</td>' in html
    assert "<pre" in html and "ssh lisbon.example 'cat booking.txt'</pre>" in html
    assert '<a href="https://hotel.example/r?a=1&amp;b=2">the hotel</a>' in html
    # the wire stays within RFC 5322's line length
    assert all(len(line) <= 998 for line in raw_last.split(b"\r\n"))


async def test_a_strangers_words_in_an_escalation_are_shown_never_obeyed(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    folder, _ = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    await append(pymap.port, folder, owner_mail(1, "Hello assistant", subject="Hi"))
    await smtp.capture.wait_for(1)
    lure = (
        "Your account is locked. <script>steal()</script>\n"
        "[Log in at yourbank.example](https://evil.example/login) "
        '<img src="https://track.example/p.gif">'
    )
    await append(
        pymap.port,
        folder,
        owner_mail(2, lure, subject="Locked", sender="stranger@example.net", auth=None),
    )
    async with asyncio.timeout(30):
        while not (found := [m for _, m in smtp.capture.messages if "/trust" in text_of(m)]):
            await asyncio.sleep(0.05)
    [escalation] = found
    html_part = escalation.get_body(("html",))
    assert html_part is not None
    html = str(html_part.get_content())
    # shown as the characters they are, as written (as on Telegram): no link, no image
    assert "&lt;script&gt;steal()&lt;/script&gt;" in html and "<script" not in html
    assert "[Log in at yourbank.example](https://evil.example/login)" in html
    assert "<a " not in html and "<img" not in html
    # their lines marked as quoted, as in the text (no Markdown quote, as on Telegram)
    assert "&gt; Your account is locked." in html and "<blockquote" not in html


async def test_an_answer_in_hebrew_is_set_right_to_left_in_the_html_part(
    pymap: PymapServer, smtp: SmtpServer, tmp_path: Path, stacks: list[Stack]
) -> None:
    # Regression (session 41): the HTML part had no dir attribute, and a client showed
    # an answer in Hebrew or Arabic left-aligned, its punctuation out of place.
    _, stack = await open_in_new_folder(pymap, smtp, tmp_path, stacks)
    answer = "שלום!\n\n- טיסה ב-3 במאי\n- מלון: Avenida\n\n> המלון כתב: מאושר\n"
    await stack.services.outbox.enqueue(
        OutboundMessage(channel="email", chat_id=OWNER, text=answer, kind="notice"),
        dedup_key="test:html:rtl",
    )
    [mail] = await smtp.capture.wait_for(1)
    html = mail.get_body(("html",)).get_content()
    assert '<div dir="auto" style=' in html
    assert '<p dir="auto" style=' in html and "שלום!" in html
    assert '<li dir="auto">טיסה ב-3 במאי' in html
    assert '<blockquote dir="auto" style=' in html
    assert text_of(mail).replace("\r\n", "\n") == answer  # the text part as written
