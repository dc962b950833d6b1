"""In-Reply-To and References as written on the wire: folded between ids, never inside
one, never as RFC 2047 encoded words (which match no Message-ID)."""

from __future__ import annotations

from email import message_from_bytes
from email.policy import compat32

from bot.config.channels import EmailChannelConfig
from bot.events import OutboundMessage
from channels.email.compose import compose
from channels.email.id_folding import MAIL_POLICY
from channels.email.outgoing import compose_outgoing
from channels.email.parsing import parse_message

# Exchange Online's ids run past a line with the header's name before them.
EXCHANGE = [
    f"<AM6PR08MB41810{n}D1E3B5E5F0B3F1F4A3C5E6A70@AM6PR08MB4181.eurprd08.prod.outlook.com>"
    for n in range(3)
]
SHORT = [f"<s{n}@x.org>" for n in range(12)]


def wire(in_reply_to: str, references: list[str], utf8: bool = False) -> bytes:
    composed = compose(
        from_addr="bot@example.com",
        display_name="Bot",
        to=["owner@example.org"],
        subject="Re: Trip",
        text="Hi",
        in_reply_to=in_reply_to,
        references=references,
    )
    if utf8:  # as channels.email.smtp sends it to a server with SMTPUTF8
        return composed.message.as_bytes(policy=MAIL_POLICY.clone(utf8=True))
    return composed.message.as_bytes()  # the policy it was composed with


def header_lines(raw: bytes, name: bytes) -> list[bytes]:
    """The lines of header ``name`` as written (its first and its continuations)."""
    lines = raw.partition(b"\r\n\r\n")[0].split(b"\r\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(name + b":"))
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if not line[:1].isspace():
            break
        out.append(line)
    return out


def test_long_ids_are_written_whole_and_folded_between_them() -> None:
    raw = wire(EXCHANGE[-1], [*EXCHANGE, *SHORT])
    parsed = message_from_bytes(raw, policy=compat32)
    assert parsed["In-Reply-To"] == EXCHANGE[-1]
    assert parsed["References"].split() == [*EXCHANGE, *SHORT]
    assert b"=?" not in raw
    lines = header_lines(raw, b"References")
    assert all(len(line) <= 998 for line in lines)
    # An id alone on its line may be long; short ones share lines of at most 78.
    assert all(len(line) <= 78 for line in lines if line.count(b"<") > 1)
    assert len(lines) < len(EXCHANGE) + len(SHORT)


def test_a_non_ascii_id_is_written_as_it_is_with_smtputf8() -> None:
    accented = "<réunion-1@exemple.fr>"
    raw = wire(accented, [EXCHANGE[0], accented], utf8=True)
    assert header_lines(raw, b"In-Reply-To") == [b"In-Reply-To: " + accented.encode()]
    assert b"=?" not in raw.partition(b"\r\n\r\n")[0]


def test_references_written_as_encoded_words_are_read_as_ids() -> None:
    # As the email package writes a long id (and this channel did before session 28):
    # read as one broken id, the thread's older ids were lost with it.
    raw = (
        b"From: o@example.org\r\nTo: bot@example.com\r\nSubject: Re: Trip\r\n"
        b"Message-ID: <m3@example.org>\r\nIn-Reply-To: <m2@example.org>\r\n"
        b"References: =?utf-8?q?=3CAM6PR08MB41810D1E3B5E5F0B3F1F4A3C5E6A70=40AM6PR?=\r\n"
        b" =?utf-8?q?08MB4181=2Eeurprd08=2Eprod=2Eoutlook=2Ecom=3E_=3Cm2=40example=2Eorg=3E?=\r\n"
        b"\r\nHi\r\n"
    )
    assert parse_message(raw).references == (
        "<AM6PR08MB41810D1E3B5E5F0B3F1F4A3C5E6A70@AM6PR08MB4181.eurprd08.prod.outlook.com>",
        "<m2@example.org>",
    )


def test_an_absurdly_long_id_is_not_named_and_no_line_passes_998() -> None:
    # Written whole, a stranger's Message-ID of 3,000 characters made a header line
    # no SMTP server need take (RFC 5322: 998 at most); it threads nothing anyway.
    absurd = "<" + "a" * 3000 + "@example.net>"
    message = OutboundMessage(
        channel="email",
        chat_id="s@example.net",
        text="Thanks, the owner will see your message.",
        kind="acknowledgement",
        in_reply_to=absurd,
        thread_refs=(absurd, "<fine@example.net>"),
        subject="Hello",
    )
    composed, _ = compose_outgoing(
        message,
        message.text,
        None,
        address="bot@example.com",
        cfg=EmailChannelConfig(address="bot@example.com"),
        recent={},
        last_from={},
    )
    raw = composed.message.as_bytes()
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998
    assert composed.message["In-Reply-To"] is None
    assert composed.message["References"] is None or absurd not in composed.message["References"]
