"""Authentication-Results verdicts and reply composition (pure functions)."""

from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from bot.config.channels import EmailChannelConfig
from bot.events import TO_ALL, TO_PARTY_ALONE, OutboundMessage
from bot.mail_subjects import MAX_SUBJECT, capped_subject, same_subject
from bot.turn_recorder import recipients
from channels.email.auth import parse_auth_results, verify_sender
from channels.email.compose import (
    ComposedMail,
    compose,
    is_reply_subject,
    references_chain,
    render_actions,
    reply_recipients,
    reply_subject,
    subject_base,
)
from channels.email.id_folding import MAIL_POLICY
from channels.email.inbound import to_inbound
from channels.email.outgoing import compose_outgoing
from channels.email.parsing import ParsedMail, parse_message
from tests.channels.email.helpers import text_of

GMAIL_STYLE = (
    "mx.example.com;\n       dkim=pass header.i=@example.org header.s=20230601 header.b=abc;\n"
    "       spf=pass (google.com: domain of owner@example.org designates 1.2.3.4 as "
    "permitted sender) smtp.mailfrom=owner@example.org;\n"
    '       dmarc=pass (p=REJECT sp=REJECT dis=NONE) header.from="example.org"'
)


def test_parse_rfc8601() -> None:
    parsed = parse_auth_results(GMAIL_STYLE)
    assert parsed is not None
    assert parsed.authserv_id == "mx.example.com"
    assert [(r.method, r.result) for r in parsed.results] == [
        ("dkim", "pass"),
        ("spf", "pass"),
        ("dmarc", "pass"),
    ]
    assert parsed.results[1].properties["smtp.mailfrom"] == "owner@example.org"
    assert parsed.results[2].properties["header.from"] == "example.org"
    none = parse_auth_results("mx.example.com 1; none")
    assert none is not None and none.results == ()
    versioned = parse_auth_results("mx (a; comment) ; dkim/1 = pass header.d=x.org")
    assert versioned is not None and versioned.results[0].result == "pass"


@pytest.mark.parametrize(
    ("headers", "kwargs", "verified"),
    [
        ([GMAIL_STYLE], {}, True),
        ([GMAIL_STYLE], {"require_all": True, "require": ["dkim", "spf", "dmarc"]}, True),
        (["mx; dkim=fail header.d=example.org; spf=pass smtp.mailfrom=example.org"], {}, True),
        (
            ["mx; dkim=fail header.d=example.org; spf=pass smtp.mailfrom=example.org"],
            {"require_all": True},
            False,
        ),
        (["mx; dkim=fail; spf=softfail smtp.mailfrom=example.org"], {}, False),
        ([], {}, False),  # no header at all
        (["mx; none"], {}, False),
        # Passing for another domain does not vouch for the From address.
        (
            ["mx; dkim=pass header.d=evil.example; spf=pass smtp.mailfrom=bounce@evil.example"],
            {},
            False,
        ),
        (["mx; dkim=pass header.d=evil.example"], {"aligned": False}, True),
        # A subdomain signature aligns (relaxed).
        (["mx; dkim=pass header.d=mail.example.org"], {}, True),
        # Only our own server's header counts when auth_serv_id is set.
        (
            ["attacker.example; dkim=pass header.d=example.org"],
            {"auth_serv_id": "mx.example.com"},
            False,
        ),
        (
            ["attacker.example; dkim=pass header.d=example.org", GMAIL_STYLE],
            {"auth_serv_id": "MX.example.com"},
            True,
        ),
        # With it, only our server's topmost header: a sender names our server in a
        # header of its own below ours (regression: the passes were added up, and a
        # forged mail ran /trust as the owner's)
        (
            [
                "mx.example.com; dkim=none; spf=fail smtp.mailfrom=evil.example",
                "mx.example.com; dkim=pass header.d=example.org; spf=pass "
                "smtp.mailfrom=example.org",
            ],
            {"auth_serv_id": "mx.example.com"},
            False,
        ),
        (
            [
                "attacker.example; dkim=none",
                "mx.example.com; dkim=none; spf=fail smtp.mailfrom=evil.example",
                "mx.example.com; dkim=pass header.d=example.org",
            ],
            {"auth_serv_id": "mx.example.com"},
            False,
        ),
        # Without auth_serv_id only the topmost header counts (the receiving server
        # prepends its own): a "pass" the sender forged below it used to vouch for them.
        (
            [
                "mx.real.example; dkim=none; spf=fail smtp.mailfrom=evil.example",
                "mx.google.com; dkim=pass header.d=example.org; spf=pass smtp.mailfrom=example.org",
            ],
            {},
            False,
        ),
        (["mx; dkim=pass header.d=example.org", "mx; dkim=fail header.d=example.org"], {}, True),
        (["mx; dmarc=pass header.from=example.org"], {"require": ["dmarc"]}, True),
        (["mx; dmarc=pass header.from=other.org"], {"require": ["dmarc"]}, False),
        (["garbage without semicolons"], {}, False),
    ],
)
def test_verdicts(headers: list[str], kwargs: dict[str, object], verified: bool) -> None:
    options: dict[str, object] = {"require": ["dkim", "spf"], **kwargs}
    verdict = verify_sender(headers, "Owner@Example.org", **options)  # type: ignore[arg-type]
    assert verdict.verified is verified, verdict.reason


def test_no_requirement_means_verified() -> None:
    assert verify_sender([], "a@b.c", require=[]).verified


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("Plans", "Re: Plans"),
        ("Re: Plans", "Re: Plans"),
        ("RE: Re: re: Plans", "Re: Plans"),
        ("Re[2]: Plans", "Re: Plans"),
        ("AW: WG: Plans", "Re: WG: Plans"),
        ("Aw: Sv: Plans", "Re: Plans"),
        ("Fwd: Plans", "Re: Fwd: Plans"),
        ("Report", "Re: Report"),
        ("Revenue", "Re: Revenue"),
        # a mail without a subject: "Re:" alone showed as an empty subject (session 41)
        ("", "Re: (no subject)"),
        (None, "Re: (no subject)"),
        ("Re:", "Re: (no subject)"),
        ("Re: (no subject)", "Re: (no subject)"),
        ("RE: (No Subject)", "Re: (no subject)"),
    ],
)
def test_reply_subject(subject: str | None, expected: str) -> None:
    assert reply_subject(subject) == expected
    assert reply_subject(expected) == expected  # the next answer: no growth


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        # A company's gateway tags the owner's incoming mail ("[EXTERNAL]") and Outlook
        # puts its "RE:" before the tag: the reply was "Re: [EXTERNAL] RE: Trip", and
        # every round added a "Re:" and a tag ("Re: [EXTERNAL] RE: [EXTERNAL] Re: ...").
        ("[EXTERNAL] RE: Trip", "Re: [EXTERNAL] Trip"),
        ("RE: [EXTERNAL] Re: [EXTERNAL] RE: Trip", "Re: [EXTERNAL] Trip"),
        ("AW: [EXT] AW: [Extern] Reise", "Re: [EXT] [Extern] Reise"),
        # a ticket's tag stays where it is, a tag with nothing after it too
        ("Re: [Ticket #123] Printer", "Re: [Ticket #123] Printer"),
        ("[Ticket #123] Printer", "Re: [Ticket #123] Printer"),
        ("Re: [draft]", "Re: [draft]"),
        ("Re: [2] things", "Re: [2] things"),
    ],
)
def test_a_tag_before_a_reply_prefix_doubles_nothing(subject: str, expected: str) -> None:
    assert reply_subject(subject) == expected
    assert reply_subject(expected) == expected  # the owner's next reply: no growth
    assert subject_base(subject) == subject_base(expected)


@pytest.mark.parametrize(
    "subject",
    ["Vá: Trip", "ΑΠ: Trip", "Σχετ: Trip", "Odg: Trip", "RE: Vá: ΑΠ: Trip"],
)
def test_more_languages_reply_prefixes_are_folded(subject: str) -> None:
    # Hungarian, Greek and Croatian/Serbian/Slovene clients: the reply was
    # "Re: Vá: Trip", and the next round "Re: Vá: Re: Vá: Trip".
    assert reply_subject(subject) == "Re: Trip"
    assert is_reply_subject(subject)


def test_a_tagged_reply_is_a_reply() -> None:
    assert is_reply_subject("[EXTERNAL] RE: Trip")
    assert is_reply_subject("[EXT] [Caution] AW: Reise")
    assert not is_reply_subject("[Ticket #123] Printer")
    assert not is_reply_subject("[EXTERNAL] Trip")


def test_a_long_subject_is_answered_cut_between_words() -> None:
    # Regression (session 41): a 5,000-character subject (spam, a pasted paragraph)
    # came back whole in "Re: ...".
    subject = " ".join(f"word{n}" for n in range(900))
    assert len(subject) > 5000
    answer = reply_subject(subject)
    assert len(answer) <= MAX_SUBJECT and answer.endswith("…")
    kept = answer.removeprefix("Re: ").removesuffix("…").split(" ")
    assert kept == subject.split(" ")[: len(kept)]  # whole words, from the start
    assert reply_subject(answer) == answer  # the next round: the same, no growth
    assert reply_subject("AW: " + subject) == answer
    # one thread's subject, for the thread finder and the "Subject:" line alike
    assert same_subject(subject_base(answer), subject_base(subject))
    assert same_subject(subject_base(subject), subject_base("RE: " + answer))
    assert not same_subject(subject_base(answer), subject_base("Another " + subject))
    assert not same_subject(subject_base("Wait…"), subject_base("Wait… what?"))
    # a script without spaces, one endless word: cut on a grapheme boundary
    for unspaced in ("会議の議題について" * 600, "x" * 5000, "👍🏽" * 3000):
        cut = reply_subject(unspaced)
        assert len(cut) <= MAX_SUBJECT and cut.endswith("…")
        assert unspaced.startswith(cut.removeprefix("Re: ").removesuffix("…"))
        assert same_subject(subject_base(cut), subject_base(unspaced))
    whole = "Trip " * 38 + "Trips!"  # 196 characters: "Re: " and it is 200
    assert reply_subject(whole) == f"Re: {whole}"


def test_a_long_subject_is_written_within_the_line_limits() -> None:
    # Every subject we write is cut (an escalation's, a notice's too), and folded in
    # RFC 5322's lines, encoded when not ASCII, or raw UTF-8 with SMTPUTF8.
    subject = "Überweisung bestätigt 確認 " * 400
    composed = compose(
        from_addr="bot@example.com",
        display_name="Bot",
        to=["o@x.org"],
        subject=subject,
        text="Hi",
        in_reply_to="<p@x.org>",
        references=["<p@x.org>"],
    )
    for utf8 in (False, True):
        raw = composed.message.as_bytes(policy=MAIL_POLICY.clone(utf8=utf8))
        head = raw.split(b"\r\n\r\n", 1)[0]
        assert all(len(line) <= 998 for line in raw.split(b"\r\n"))
        assert head.isascii() is not utf8
        parsed = message_from_bytes(raw, policy=policy.default)
        assert parsed["Subject"] == capped_subject(" ".join(subject.split()))
        assert len(parsed["Subject"]) <= MAX_SUBJECT
        assert parsed["In-Reply-To"] == "<p@x.org>"


def test_references_chain() -> None:
    assert references_chain(["<a@x>", "<b@x>"], "<c@x>") == ["<a@x>", "<b@x>", "<c@x>"]
    assert references_chain(["<a@x>", "<b@x>", "<a@x>"], "<b@x>") == ["<a@x>", "<b@x>"]
    assert references_chain([], None) == []
    long = [f"<{i}@x>" for i in range(50)]
    chain = references_chain(long, "<50@x>")
    assert len(chain) == 20 and chain[0] == "<0@x>" and chain[-1] == "<50@x>"


def test_reply_recipients() -> None:
    me = ["bot@example.com"]
    assert reply_recipients(
        "o@x.org", ["bot@example.com", "p@x.org"], ["q@x.org"], me, reply_all=False
    ) == (["o@x.org"], [])
    assert reply_recipients(
        "o@x.org",
        ["BOT@example.com", "p@x.org", "o@x.org"],
        ["q@x.org", "p@x.org", "bot@example.com"],
        me,
        reply_all=True,
    ) == (["o@x.org", "p@x.org"], ["q@x.org"])


def test_compose_wire_format() -> None:
    composed = compose(
        from_addr="bot@example.com",
        display_name="Ünïcode Assistant",
        to=["o@x.org"],
        subject="Re: Grüße",
        text="Hällo\n" + "long line " * 50,
        in_reply_to="<p@x.org>",
        references=["<r@x.org>", "<p@x.org>"],
    )
    raw = composed.message.as_bytes()
    assert all(len(line) <= 998 for line in raw.split(b"\r\n"))
    parsed = message_from_bytes(raw, policy=policy.default)
    assert parsed["Message-ID"] == composed.message_id
    assert composed.message_id.endswith("@example.com>")
    assert str(parsed["From"]) == "Ünïcode Assistant <bot@example.com>"
    assert parsed["Subject"] == "Re: Grüße"
    assert parsed["References"] == "<r@x.org> <p@x.org>"
    assert text_of(parsed).replace("\r\n", "\n").startswith("Hällo\n")
    assert composed.recipients == ["o@x.org"]


def test_a_short_non_ascii_reply_goes_in_seven_bits() -> None:
    # Regression (session 40): "Gerne, für Freitag ..." went out as 8bit without
    # BODY=8BITMIME (RFC 6152 forbids it; a 7-bit relay mangles it and breaks DKIM).
    composed = compose(
        from_addr="bot@example.com",
        display_name=None,
        to=["o@x.org"],
        subject="Re: Freitag",
        text="Gerne, für Freitag ist alles gebucht. Grüße! 👋",
    )
    raw = composed.message.as_bytes()
    assert all(byte < 0x80 for byte in raw)
    assert b"Content-Transfer-Encoding: 8bit" not in raw
    parsed = message_from_bytes(raw, policy=policy.default)
    assert text_of(parsed).startswith("Gerne, für Freitag ist alles gebucht. Grüße! 👋")


def test_render_actions() -> None:
    text = "Message from stranger. /trust p1 to let me answer."
    out = render_actions(text, [("Trust", "/trust p1"), ("Block", "/block p1")])
    assert out.count("/trust p1") == 1  # already in the text: not repeated
    assert "/block p1    (Block)" in out
    assert render_actions("x", []) == "x"


def test_compose_keeps_every_header_on_one_line() -> None:
    # str.splitlines() breaks (CR, LF, U+2028, U+0085, ...) make the email policy refuse
    # a header value; other people's subjects and names may carry any of them.
    composed = compose(
        from_addr="bot@example.com",
        display_name="My\u2028Assistant",
        to=["o@x.org"],
        subject="Re: Cheap\u2028offer\r\nBcc: x@evil.example\x85now",
        text="body",
        extra_headers={"Auto-Submitted": "auto-replied\r\n"},
    )
    parsed = message_from_bytes(composed.message.as_bytes(), policy=policy.default)
    assert parsed["Subject"] == "Re: Cheap offer Bcc: x@evil.example now"
    assert str(parsed["From"]) == "My Assistant <bot@example.com>"
    assert parsed["Auto-Submitted"] == "auto-replied"
    assert parsed["Bcc"] is None


def test_compose_writes_no_control_character_into_a_header() -> None:
    # A subject may carry any character RFC 2047 can encode ("=?utf-8?q?a=00b?="), and
    # the reply's subject copied it: a NUL (which RFC 5322 forbids anywhere in a mail,
    # and which servers may refuse) or a terminal escape went out in the header as raw.
    composed = compose(
        from_addr="bot@example.com",
        display_name="My\x00Assistant",
        to=["o@x.org"],
        subject="Re: Disk\x00 full on \x1b[31mdb1\x7f\tnow",
        text="body",
    )
    raw = composed.message.as_bytes()
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert not any((byte < 32 and byte not in (9, 10, 13)) or byte == 127 for byte in head)
    parsed = message_from_bytes(raw, policy=policy.default)
    assert parsed["Subject"] == "Re: Disk full on [31mdb1 now"
    assert str(parsed["From"]) == "My Assistant <bot@example.com>"


FIRST_FIVE = [f"p{i}@x.org" for i in range(5)]
OWNER_ADDRESSES = frozenset({"o@x.org", "owner@home.example"})


def _mail_with_reply_to(sender: str, reply_to: str) -> bytes:
    return (
        f"From: {sender}\r\nTo: bot@example.com\r\nReply-To: {reply_to}\r\n"
        "Subject: Tickets\r\nMessage-ID: <rt-1@x.org>\r\n\r\nTwo for Friday.\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("sender", "reply_to", "answered", "readers"),
    [
        ("s@x.org", "Ann <ann@home.example>", ["ann@home.example"], ["ann@home.example"]),
        ("s@x.org", "s@x.org", ["s@x.org"], None),  # the sender itself: nothing to keep
        ("s@x.org", "a@x.org, b@x.org", ["a@x.org", "b@x.org"], ["a@x.org", "b@x.org"]),
        # a stranger's mail cannot have its acknowledgement mailed to hundreds
        ("s@x.org", ", ".join(f"p{i}@x.org" for i in range(300)), FIRST_FIVE, FIRST_FIVE),
        ("s@x.org", "undisclosed-recipients:;", ["s@x.org"], None),
        ("o@x.org", "owner@home.example", ["owner@home.example"], None),  # the owner's other
        # The owner's mail is answered at the owner's addresses only, whatever its
        # Reply-To names: the answer carries the owner's context.
        ("o@x.org", "Ann <ann@home.example>", ["o@x.org"], None),
        ("o@x.org", "a@x.org, owner@home.example", ["owner@home.example"], None),
        ("o@x.org", ", ".join(f"p{i}@x.org" for i in range(300)), ["o@x.org"], None),
    ],
)
def test_a_reply_goes_where_the_mails_reply_to_asks(
    sender: str, reply_to: str, answered: list[str], readers: list[str] | None
) -> None:
    raw = _mail_with_reply_to(f"Someone <{sender}>", reply_to)
    cfg = EmailChannelConfig(address="bot@example.com")
    parsed = parse_message(raw)
    inbound = to_inbound(parsed, raw, 1, "1", cfg, owner=OWNER_ADDRESSES)
    assert inbound.metadata.get("readers") == readers
    meta = recipients(inbound.metadata)  # what the core's reply target keeps of it
    reply = OutboundMessage(
        channel="email",
        chat_id=sender,
        text="Booked.",
        in_reply_to="<rt-1@x.org>",
        metadata=meta,
    )
    for recent in ({}, {"<rt-1@x.org>": parsed}):  # after a restart, and before
        composed, _ = compose_as_channel(reply, "Booked.", recent, {})
        assert composed.recipients == answered
    # An acknowledgement of a stranger's mail (the core gives it no metadata) goes
    # there too, from the channel's memory of the mail; an escalation goes to its
    # recipient whatever it is about.
    ack = OutboundMessage(channel="email", chat_id=sender, text="Got it.", kind="acknowledgement")
    composed, _ = compose_as_channel(
        ack, "Got it.", {"<rt-1@x.org>": parsed}, {sender: "<rt-1@x.org>"}
    )
    assert composed.recipients == answered
    escalation = OutboundMessage(
        channel="email", chat_id=sender, text="A stranger.", kind="escalation"
    )
    composed, _ = compose_as_channel(escalation, "A stranger.", {}, {})
    assert composed.recipients == [sender]


def test_the_owners_replyall_goes_to_everyone_as_a_mail_clients_reply_all() -> None:
    # Regression (session 41): the owner's words went to the party alone, always; with
    # /replyall (TO_ALL) they go to the sender and the mail's To and Cc but ourselves,
    # each once whatever its case, with reply_all off too.
    def sent(**meta: object) -> ComposedMail:
        message = OutboundMessage(
            channel="email",
            chat_id="eve@s.example",
            text="Off sick.",
            party_id="p1",
            in_reply_to="<e1@s.example>",
            metadata=meta,
        )
        return compose_as_channel(message, "Off sick.", {}, {})[0]

    openly = {"to": ["BOT@Example.com", "Carol@x.org"], "cc": ["carol@X.org", "dan@x.org"]}
    everyone = sent(**{TO_ALL: True}, **openly)
    assert everyone.recipients == ["eve@s.example", "Carol@x.org", "dan@x.org"]
    assert everyone.message["To"] == "eve@s.example, Carol@x.org"
    assert everyone.message["Cc"] == "dan@x.org"
    assert everyone.message["In-Reply-To"] == "<e1@s.example>"
    # their Reply-To instead of their From, as a mail client's reply-all
    desk = sent(**{TO_ALL: True, "reply_to": ["desk@s.example"]}, **openly)
    assert desk.recipients == ["desk@s.example", "Carol@x.org", "dan@x.org"]
    # we were only blind-copied: to them alone (the others would learn the owner had it)
    assert sent(**{TO_ALL: True}, to=["carol@x.org"], cc=["dan@x.org"]).recipients == [
        "eve@s.example"
    ]
    # /reply: them alone, as before
    assert sent(**{TO_PARTY_ALONE: True}, **openly).recipients == ["eve@s.example"]


def compose_as_channel(
    message: OutboundMessage,
    text: str,
    recent: dict[str, ParsedMail],
    last_from: dict[str, str],
) -> tuple[ComposedMail, str]:
    """``message`` composed by the channel (address bot@example.com, the owner's
    addresses :data:`OWNER_ADDRESSES`)."""
    cfg = EmailChannelConfig(address="bot@example.com")
    return compose_outgoing(
        message,
        text,
        None,
        address="bot@example.com",
        cfg=cfg,
        recent=recent,
        last_from=last_from,
        owner=OWNER_ADDRESSES,
    )


def test_the_owner_s_answer_never_follows_a_stranger_s_reply_to_kept_from_before() -> None:
    # A turn stored by an older version keeps the Reply-To it followed then: the answer
    # sent now (from the outbox, after the upgrade) goes to the owner all the same.
    reply = OutboundMessage(
        channel="email",
        chat_id="o@x.org",
        text="Your salary is ...",
        in_reply_to="<rt-1@x.org>",
        metadata={"reply_to": ["thief@evil.example"], "readers": ["thief@evil.example"]},
    )
    composed, _ = compose_as_channel(reply, "Your salary is ...", {}, {})
    assert composed.recipients == ["o@x.org"]
    assert composed.message["To"] == "o@x.org"


def test_an_answer_to_a_mail_without_a_message_id_says_re() -> None:
    # Regression: with no Message-ID to answer under, the reply went out under the
    # mail's own subject ("Ohne ID"), without the "Re:" every other answer has.
    cfg = EmailChannelConfig(address="bot@example.com")

    def subject(kind: str) -> str:
        message = OutboundMessage(channel="email", chat_id="o@x.org", text="Ja.", kind=kind)
        _, said = compose_outgoing(
            message, "Ja.", "Ohne ID", address="bot@example.com", cfg=cfg, recent={},
            last_from={}, owner=OWNER_ADDRESSES,
        )  # fmt: skip
        return said

    assert subject("reply") == "Re: Ohne ID"
    assert subject("command") == "Re: Ohne ID"
    assert subject("notice") == "Ohne ID"  # not an answer: as given
