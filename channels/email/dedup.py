"""The key by which the core recognises a mail it already has (``InboundMessage.message_id``).

The Message-ID alone is no such key: a cron job or a monitoring alert may send every
report with the same Message-ID, and each report after the first was dropped as a
duplicate, unrecorded. The key is the Message-ID plus a hash of the content
(``<id@host>#sha256:...``): a true redelivery of one mail (a restart between delivery
and ``\\Seen``, a re-scan after the server renumbered the folder, a second copy of the
mail with its own ``Received`` headers) has the same key and is dropped; the same
Message-ID with new content is a new message. The Message-ID itself stays the
``message_ref`` by which replies find their thread.

Before this key, a mail was known by its bare Message-ID, and the core's records of the
mails delivered then hold that. So that such a mail delivered again after the upgrade
is still recognised, the mails that may have been delivered under the old key keep it
(:class:`KeyEpoch`): those already in the folder when this version first started there
(by UID, exact while the server keeps the folder's UIDVALIDITY), and after the server
renumbered the folder, those dated before that start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from datetime import UTC, datetime

from bot.channel import ChannelHost
from bot.events import iso, utcnow
from bot.moments import parse_moment

log = logging.getLogger("my_agent.email")

# The blank line that ends the header block.
_HEADER_END = re.compile(rb"\r?\n\r?\n")


def content_digest(from_addr: str | None, date: datetime | None, subject: str, raw: bytes) -> str:
    """A hash of what the sender sent: From, Date, Subject and the body as sent. Headers a
    server adds on the way (``Received``, ``Authentication-Results``, ``Delivered-To``)
    are left out, so that two copies of one mail hash alike; line ends are normalised."""
    found = _HEADER_END.search(raw)
    body = raw[found.end() :] if found else b""
    body = body.replace(b"\r\n", b"\n").rstrip()
    when = iso(date.astimezone(UTC)) if date else ""
    head = f"{from_addr or ''}\0{when}\0{subject}\0".encode("utf-8", "surrogatepass")
    return hashlib.sha256(head + body).hexdigest()[:32]


def dedup_key(
    message_id: str | None,
    raw: bytes,
    *,
    from_addr: str | None,
    date: datetime | None,
    subject: str,
    legacy: bool = False,
) -> str:
    """The mail's key: ``<id>#sha256:<content>``; the bare Message-ID for a mail that may
    have been delivered under it (``legacy``); without a Message-ID, the hash of the
    raw bytes (``sha256:...``, as ever: stable across a renumbering)."""
    if message_id is None:
        return "sha256:" + hashlib.sha256(raw).hexdigest()[:32]
    if legacy:
        return message_id
    return f"{message_id}#sha256:{content_digest(from_addr, date, subject, raw)}"


class KeyEpoch:
    """Which mails of a folder keep the bare Message-ID key, persisted with the cursors
    (``<folder>:content_keys``: the UIDVALIDITY and last UID when this version first
    started in the folder, and the time; ``since`` null on a new installation, where no
    mail has an old key)."""

    def __init__(self, host: ChannelHost, folder: str) -> None:
        self._host = host
        self._key = f"{folder}:content_keys"
        self._mark: dict[str, object] | None = None

    @property
    def loaded(self) -> bool:
        return self._mark is not None

    async def load(self, validity: str, existing: bool, last_uid: int) -> None:
        """Read the mark, or set it at this first start: ``existing`` when an earlier
        version has read the folder, whose mails up to ``last_uid`` (the server's
        ``UIDNEXT - 1`` under ``validity``) may then have the old key."""
        stored = await self._host.get_cursor("email", self._key)
        if stored is not None:
            try:
                mark = json.loads(stored)
                if isinstance(mark, dict):
                    self._mark = mark
                    return
            except ValueError:
                pass
            log.warning(
                "unreadable %s cursor %r: keeping old keys for mail dated before now",
                self._key,
                stored,
            )
        mark = {
            "uidvalidity": validity,
            "uid": last_uid if existing else 0,
            "since": iso(utcnow()) if existing or stored is not None else None,
        }
        await self._host.set_cursor("email", self._key, json.dumps(mark))
        self._mark = mark

    def legacy(self, validity: str, uid: int, date: datetime | None) -> bool:
        """Whether mail ``uid`` (under ``validity``, dated ``date``) keeps the old key."""
        mark = self._mark
        if mark is None or mark.get("since") is None:
            return False
        if str(mark.get("uidvalidity")) == validity:
            last = mark.get("uid")
            return isinstance(last, int) and uid <= last
        # The folder was renumbered since: the mail's date is what is left to go by.
        since = parse_moment(mark["since"])
        if since is None:
            return False
        return date is None or date < since
