"""Mails the server would not hand over: passed over for now, retried later, never lost.

A FETCH that fails :data:`FETCH_ATTEMPTS` times in a row (the server refuses it, or the
connection drops over it: Dovecot hangs up on a message file it cannot read, Exchange
refuses an item it cannot convert, a flaky link drops a big mail halfway) would hold up
every later mail if it were retried at once forever. Such a mail is recorded here, in
the channel's cursors (``<folder>:unfetched``) before the UID cursor moves past it, and
retried after a pause that doubles from ``imap.reconnect_max`` up to an hour, across
reconnects and restarts, until it is delivered or the server no longer has it. It stays
unread meanwhile, where the owner's own client shows it. So is a mail the core fails
over as many times in a row with an error that is no outage (a bug this one mail
triggers), which was retried at once forever, holding up every later mail.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.backoff import doubled
from bot.channel import ChannelHost

log = logging.getLogger("my_agent.email")

# Failed FETCHes in a row (each one a reconnect) before a mail is passed over for now.
FETCH_ATTEMPTS = 5
# The longest pause between two retries of a passed-over mail.
MAX_PAUSE = 3600.0
# How the status line names mails the core failed over (see Inbox).
_UNSTORABLE = "the assistant failed over (see the log)"


@dataclass
class _Entry:
    failures: int  # FETCHes that failed, the first FETCH_ATTEMPTS included
    retry_at: float  # wall-clock time of the next try (a restart keeps the pause)
    unstorable: bool = False  # fetched, but the core failed over it (not the server)


class Unfetched:
    """The persisted list of one folder's passed-over mails (UIDs of one UIDVALIDITY)."""

    def __init__(
        self,
        host: ChannelHost,
        folder: str,
        first_pause: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._host = host
        self.folder = folder
        self.first_pause = first_pause
        self._clock = clock
        self._key = f"{folder}:unfetched"
        self._loaded = False
        self.validity: str | None = None
        self.entries: dict[int, _Entry] = {}

    async def load(self, validity: str) -> None:
        """Read the record once; one for another UIDVALIDITY is dropped (the resync after
        a renumbering finds those mails among the unseen, under their new UIDs)."""
        if not self._loaded:
            raw = await self._host.get_cursor("email", self._key)
            self._loaded = True
            try:
                data = json.loads(raw) if raw else {}
                self.validity = str(data["uidvalidity"]) if data else None
                self.entries = {
                    int(uid): _Entry(
                        int(e["failures"]), float(e["retry_at"]), bool(e.get("unstorable"))
                    )
                    for uid, e in data.get("mails", {}).items()
                }
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("unreadable %s record %r: starting it afresh", self._key, raw)
                self.entries = {}
        if self.validity != validity:
            if self.entries:
                log.info("UIDVALIDITY changed: the passed-over mails are found by the resync")
            self.validity = validity
            self.entries = {}
            await self._save()

    def __contains__(self, uid: int) -> bool:
        return uid in self.entries

    def due(self) -> list[int]:
        """The passed-over mails whose pause is over, oldest UID first."""
        now = self._clock()
        # No pause is longer than MAX_PAUSE: a retry time further ahead was set before
        # the clock was set back (by a day: the mail waited a day more). Due now.
        return sorted(
            uid
            for uid, entry in self.entries.items()
            if entry.retry_at <= now or entry.retry_at - now > MAX_PAUSE
        )

    async def failed(self, uid: int, failures: int, unstorable: bool = False) -> None:
        """Record a FETCH of ``uid`` that failed (its ``failures``-th in a row) and when
        to try again; persisted before the caller moves its cursor past the mail.
        ``unstorable``: the mail was fetched, and the core failed over it."""
        entry = self.entries.get(uid)
        if entry is not None:  # a retry: the count survives a restart, the caller's not
            failures = max(failures, entry.failures + 1)
        pause = doubled(self.first_pause, failures - FETCH_ATTEMPTS, MAX_PAUSE)
        self.entries[uid] = _Entry(failures, self._clock() + pause, unstorable)
        await self._save()
        log.warning(
            "mail uid %d in %s could not be %s (%d attempts): passed over for now, "
            "left unread, next try in %.0fs",
            uid,
            self.folder,
            "taken in by the core" if unstorable else "fetched",
            failures,
            pause,
        )

    async def done(self, uid: int) -> None:
        """``uid`` was fetched at last (or is no longer on the server)."""
        if self.entries.pop(uid, None) is not None:
            await self._save()

    def problems(self) -> list[str]:
        """What an operator should know (``my-agent status``, the health check)."""
        out: list[str] = []
        for unstorable, what in ((False, "the server would not hand over"), (True, _UNSTORABLE)):
            uids = sorted(uid for uid, e in self.entries.items() if e.unstorable == unstorable)
            if uids:
                count = len(uids)
                listed = ", ".join(str(uid) for uid in uids)
                out.append(
                    f"{count} mail{'s' if count > 1 else ''} in {self.folder} {what} "
                    f"(uid {listed}), retried"
                )
        return out

    async def _save(self) -> None:
        mails = {
            str(uid): {"failures": e.failures, "retry_at": round(e.retry_at, 3)}
            | ({"unstorable": True} if e.unstorable else {})
            for uid, e in sorted(self.entries.items())
        }
        # "problem": the status line, for `my-agent status` while the daemon is stopped
        # (bot/channel.py, ChannelHost.set_cursor)
        problem = "; ".join(self.problems()) or None
        value = json.dumps({"uidvalidity": self.validity, "mails": mails, "problem": problem})
        await self._host.set_cursor("email", self._key, value)
