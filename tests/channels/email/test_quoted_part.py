"""The quoted history a mail carries, kept beside its turn (metadata ``quoted``): the
core shows it to the model when the mail answered never reached the conversation
(session 39: it was stripped, and nothing read ``full_body``)."""

from __future__ import annotations

from email.message import EmailMessage

from bot.config.channels import EmailChannelConfig
from bot.events import InboundMessage
from channels.email.inbound import QUOTED_LIMIT, to_inbound
from channels.email.parsing import parse_message
from channels.email.quotes import quoted_part, strip_reply

REPLY = (
    "Please book it.\n\n-- \nOwner, sent in a hurry\n\n"
    "On Mon, 13 Jan 2025 at 17:40, Bob <bob@else.example> wrote:\n"
    "> Trattoria Luca, Friday 19:30?\n>\n> Bob\n"
)


def test_the_quoted_part_is_what_stripping_drops_with_its_attribution() -> None:
    assert strip_reply(REPLY) == "Please book it."
    assert quoted_part(REPLY) == (
        "On Mon, 13 Jan 2025 at 17:40, Bob <bob@else.example> wrote:\n"
        "> Trattoria Luca, Friday 19:30?\n>\n> Bob"
    )  # the owner's signature is theirs: not in it


def test_inline_answers_keep_each_quoted_run_apart() -> None:
    body = "> Friday?\nYes.\n> Where?\nLuca."
    assert quoted_part(body) == "> Friday?\n\n> Where?"


def test_nothing_is_quoted_of_a_forward_or_a_mail_that_is_all_quote() -> None:
    forward = "FYI\n\n---------- Forwarded message ---------\nFrom: Bob <b@x>\n\n> old"
    assert quoted_part(forward) == ""
    outlook = "See below\n\nFrom: Bob <b@x>\nSent: Monday\nTo: me\nSubject: Offer\n\nHi"
    assert quoted_part(outlook, forward=True) == ""
    assert quoted_part("> only a quote\n> nothing else") == ""


def raw_mail(body: str, in_reply_to: str | None = "<bob-1@else.example>") -> bytes:
    msg = EmailMessage()
    msg["From"] = "Owner <owner@example.org>"
    msg["To"] = "bot@example.com"
    msg["Subject"] = "Re: Dinner"
    msg["Message-ID"] = "<m1@example.org>"
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    msg.set_content(body)
    return msg.as_bytes()


def inbound(raw: bytes) -> InboundMessage:
    return to_inbound(parse_message(raw), raw, 1, "1", EmailChannelConfig())


def test_the_inbound_message_keeps_the_quote_and_the_mail_it_answers() -> None:
    msg = inbound(raw_mail(REPLY))
    assert msg.text == "Please book it."
    assert "Trattoria Luca" in msg.metadata["quoted"]
    assert msg.metadata["in_reply_to"] == "<bob-1@else.example>"
    assert "full_body" in msg.metadata


def test_a_mail_without_history_keeps_no_quote() -> None:
    msg = inbound(raw_mail("Please book it.\n"))
    assert "quoted" not in msg.metadata and "in_reply_to" not in msg.metadata


def test_a_long_thread_below_is_kept_to_its_start() -> None:
    history = "".join(f"> line {n} of a long thread\n" for n in range(2000))
    msg = inbound(
        raw_mail(f"Thoughts?\n\nOn Mon, 13 Jan 2025, Bob <b@x.example> wrote:\n{history}")
    )
    quoted = msg.metadata["quoted"]
    assert quoted.startswith("On Mon, 13 Jan 2025") and "> line 0 of" in quoted
    assert len(quoted) < QUOTED_LIMIT + 100
    assert quoted.endswith("more characters of quoted history not kept]")
