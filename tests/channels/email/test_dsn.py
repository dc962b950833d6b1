"""Delivery reports (bounces): what they say, and which are none."""

from __future__ import annotations

from email.message import EmailMessage

from channels.email.dsn import Bounce, Undeliverable
from channels.email.parsing import parse_message
from tests.channels.email.test_e2e_bounces import postfix_bounce


def test_a_postfix_bounce_is_read() -> None:
    raw = postfix_bounce(1, "mx.example.net", "Ann@Example.net", "<ours-1@example.com>", "Re: x")
    mail = parse_message(raw)
    assert mail.auto_submitted
    assert mail.bounce == Bounce(
        action="failed",
        recipients=("ann@example.net",),
        status="5.1.1",
        diagnostic="550 5.1.1 <Ann@Example.net>: Recipient address rejected: "
        "User unknown in virtual mailbox table",
        original_id="<ours-1@example.com>",
        original_subject="Re: x",
    )
    assert mail.bounce.summary().startswith(
        'Delivery failed: the mail to ann@example.net ("Re: x") could not be delivered: 550'
    )


def test_exim_and_delayed_and_wrapped_reports() -> None:
    # Exim: no report part, the failed addresses in a header; marked by nothing else.
    exim = parse_message(
        b"From: Mail Delivery System <Mailer@relay.example.net>\r\n"
        b"X-Failed-Recipients: a@example.net, b@example.net\r\n"
        b"In-Reply-To: <ours-2@example.com>\r\nSubject: Mail delivery failed\r\n\r\n"
        b"This message was created automatically by mail delivery software.\r\n"
    )
    assert exim.auto_submitted and exim.bounce is not None
    assert exim.bounce.recipients == ("a@example.net", "b@example.net")
    assert exim.bounce.original_id == "<ours-2@example.com>" and exim.bounce.failed
    # A delay notice, wrapped in a multipart/mixed by a gateway that added a footer.
    report = (
        b"From: postmaster@gw.example.org\r\nSubject: Delivery delayed\r\n"
        b'Content-Type: multipart/mixed; boundary="outer"\r\n\r\n'
        b'--outer\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="in"'
        b"\r\n\r\n--in\r\nContent-Type: text/plain\r\n\r\nStill trying.\r\n"
        b"--in\r\nContent-Type: message/delivery-status\r\n\r\n"
        b"Reporting-MTA: dns; gw\r\n\r\nFinal-Recipient: rfc822; c@example.org\r\n"
        b"Action: delayed\r\nStatus: 4.2.2\r\n\r\n--in--\r\n"
        b"--outer\r\nContent-Type: text/plain\r\n\r\nScanned by the gateway.\r\n--outer--\r\n"
    )
    delayed = parse_message(report)
    assert delayed.bounce is not None and delayed.bounce.action == "delayed"
    assert delayed.bounce.recipients == ("c@example.org",)
    assert delayed.bounce.summary().startswith("Delivery delayed: the mail to c@example.org")


def test_a_bounce_forwarded_as_an_attachment_makes_no_bounce() -> None:
    # The owner asks why a mail bounced, the bounce attached: theirs is no bounce.
    bounce = parse_message(postfix_bounce(3, "mx.example.net", "a@b.org", "<x@y.org>", "s"))
    assert bounce.bounce is not None
    forward = EmailMessage()
    forward["From"] = "owner@example.org"
    forward["Subject"] = "Fwd: Undelivered Mail Returned to Sender"
    forward.set_content("Why did this bounce?")
    forward.add_attachment(
        postfix_bounce(3, "mx.example.net", "a@b.org", "<x@y.org>", "s"),
        maintype="message",
        subtype="rfc822",
    )
    mail = parse_message(forward.as_bytes())
    assert mail.bounce is None and not mail.auto_submitted


def test_undeliverable_counts_reports_of_our_own_mail_only() -> None:
    held = Undeliverable()
    forged = Bounce("failed", ("owner@example.org",), "5.1.1", "", "<theirs@x.org>", "")
    assert held.reported(forged) == ()
    held.sent("<ours@example.com>", ["Owner@Example.org", "cc@example.org"])
    ours = Bounce("failed", ("owner@example.org",), "5.1.1", "", "<ours@example.com>", "")
    assert held.reported(ours) == ("owner@example.org",)
    assert held.holds("OWNER@example.org") and not held.holds("cc@example.org")
    delivered = Bounce("delivered", ("cc@example.org",), "2.0.0", "", "<ours@example.com>", "")
    assert held.reported(delivered) == ()
    held.HOLD_SECONDS = -1.0
    held.reported(Bounce("delayed", (), "4.2.2", "", "<ours@example.com>", ""))
    assert not held.holds("cc@example.org")  # expired at once
