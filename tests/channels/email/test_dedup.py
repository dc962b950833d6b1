"""The key a mail is deduplicated by: Message-ID plus content, and the old keys kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from bot.events import utcnow
from channels.email.dedup import KeyEpoch, dedup_key
from channels.email.parsing import parse_message
from tests.channels.email.conftest import FakeHost

MAIL = (
    b"From: Cron <cron@example.org>\r\nTo: bot@example.com\r\nSubject: Backup\r\n"
    b"Date: Tue, 14 Jan 2025 09:12:00 +0100\r\nMessage-ID: <backup@example.org>\r\n\r\n"
    b"Backup of Monday: OK.\r\n"
)


def key(raw: bytes, legacy: bool = False) -> str:
    mail = parse_message(raw)
    return dedup_key(
        mail.message_id,
        raw,
        from_addr=mail.from_addr,
        date=mail.date,
        subject=mail.subject,
        legacy=legacy,
    )


def test_the_key_is_the_message_id_plus_the_content() -> None:
    assert key(MAIL).startswith("<backup@example.org>#sha256:")
    # The same mail as another copy (headers our servers add, LF line ends): same key.
    copy = b"Received: from mx2 by mx\r\nDelivered-To: alias@example.com\r\n" + MAIL
    assert key(copy.replace(b"\r\n", b"\n")) == key(MAIL)
    # The same Message-ID with new content, or sent at another time: another key.
    assert key(MAIL.replace(b"Monday: OK", b"Tuesday: FAILED")) != key(MAIL)
    assert key(MAIL.replace(b"09:12:00", b"10:12:00")) != key(MAIL)
    assert key(MAIL, legacy=True) == "<backup@example.org>"
    without_id = MAIL.replace(b"Message-ID: <backup@example.org>\r\n", b"")
    assert key(without_id).startswith("sha256:")  # as before: the raw bytes' hash


async def test_a_new_installation_has_no_old_keys() -> None:
    host = FakeHost()
    keys = KeyEpoch(host, "INBOX")
    await keys.load("7", existing=False, last_uid=120)
    assert not keys.legacy("7", 101, None)
    assert json.loads(host.cursors[("email", "INBOX:content_keys")])["since"] is None


async def test_an_upgraded_installation_keeps_the_old_key_for_the_mail_it_had() -> None:
    host = FakeHost()
    keys = KeyEpoch(host, "INBOX")
    await keys.load("7", existing=True, last_uid=120)
    assert keys.legacy("7", 120, None) and not keys.legacy("7", 121, None)
    # After a restart the mark is read back, not set again (mail since has new keys).
    again = KeyEpoch(host, "INBOX")
    await again.load("7", existing=True, last_uid=200)
    assert again.legacy("7", 120, None) and not again.legacy("7", 121, None)
    # Renumbered by the server: the mail's date is what is left to go by.
    now = utcnow()
    assert again.legacy("8", 1, now - timedelta(days=1))
    assert not again.legacy("8", 1, now + timedelta(minutes=5))
    assert not again.legacy("8", 1, datetime(2999, 1, 1, tzinfo=UTC))
