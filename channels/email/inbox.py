"""Reading the watched folder: every mail not yet delivered, in UID order.

For each: ``UID FETCH`` with ``BODY.PEEK[]`` (it stays unseen), hand it to the channel's
``deliver`` (the core makes it durable), and only then mark it ``\\Seen`` or move it to
``imap.processed_folder`` and advance the persisted UID cursor. The cursor is stored with
the folder's UIDVALIDITY; when the server renumbers the folder, what is still unseen (or
still in the folder) is delivered again and the core drops what it already has. A mail
the server would not hand over is passed over for now and retried
(:mod:`channels.email.unfetched`). A mail marked handled by an earlier run (the data
directory restored from an older backup) is recorded, not answered
(:mod:`channels.email.handled`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from bot.channel import ChannelHost
from bot.config.channels import EmailChannelConfig
from bot.events import utcnow
from channels.email.dedup import KeyEpoch
from channels.email.handled import HandledMarks
from channels.email.imap import ImapSession
from channels.email.imap_wire import CommandRefused
from channels.email.unfetched import FETCH_ATTEMPTS, Unfetched

log = logging.getLogger("my_agent.email")

# IMAP dates (RFC 3501 date-text) name months in English whatever the locale.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# Hands one fetched mail (raw, UID, UIDVALIDITY, handled by an earlier run) to the core;
# False when not stored (an outage: retried, holding up later mail); raises Unstorable
# when the core failed over it.
Deliver = Callable[[bytes, int, str, bool], Awaitable[bool]]


class Unstorable(Exception):
    """The core failed over this mail with an error that is no outage (a bug it hits)."""


class Inbox:
    """The folder's reader, one IMAP session after another; its cursors live with the
    host's (``<folder>:uidvalidity``, ``<folder>:last_uid``, ``<folder>:unfetched``)."""

    def __init__(self, cfg: EmailChannelConfig, host: ChannelHost, deliver: Deliver) -> None:
        self._cfg = cfg
        self._host = host
        self._deliver = deliver
        self.unfetched = Unfetched(host, cfg.imap.folder, cfg.imap.reconnect_max)
        self.keys = KeyEpoch(host, cfg.imap.folder)  # which mails keep the old dedup key
        self.marks = HandledMarks(host, cfg.imap.folder)  # our keyword on handled mail
        self._fetching: tuple[str, int] | None = None  # (UIDVALIDITY, UID) being fetched
        self._fetch_failures: dict[tuple[str, int], int] = {}
        self._core_failures: dict[tuple[str, int], int] = {}  # Unstorable, in a row
        self._backlog: str | None = None  # <folder>:backlog_before, once read
        # the server's refusal to move or flag delivered mail, for status (None: none)
        self.mark_problem: str | None = None

    def session_started(self) -> None:
        """A new session: no FETCH is under way."""
        self._fetching = None

    async def session_failed(self) -> None:
        """The session ended in an error; one during a FETCH counts against that mail."""
        if self._fetching is not None:
            await self._fetch_failed(*self._fetching)

    def _keys(self) -> tuple[str, str]:
        folder = self._cfg.imap.folder
        return f"{folder}:uidvalidity", f"{folder}:last_uid"

    async def sync(self, session: ImapSession) -> bool:
        """Deliver every message not yet delivered. False when the core refused one."""
        assert session.mailbox is not None
        self.marks.selected(session.mailbox)
        synced = await self._sync(session)
        await self.marks.tell()  # (after a failed sync: what came is told after the next)
        return synced

    async def _sync(self, session: ImapSession) -> bool:
        assert session.mailbox is not None
        host = self._host
        key_validity, key_uid = self._keys()
        await session.noop()  # some servers refresh the selected mailbox only on a command
        validity = str(session.mailbox.uidvalidity)
        await self.unfetched.load(validity)
        stored = await host.get_cursor("email", key_validity)
        if not self.keys.loaded:
            await self.keys.load(validity, stored is not None, await self._last_uid(session))
        backlog = await self._backlog_before(stored is None)
        if stored != validity:
            # First run, or the server renumbered the folder: every UID we stored is
            # meaningless. Unprocessed mail is exactly what is still unseen (or still in
            # the folder when processed mail is moved away); the core drops by its key
            # anything that was delivered but not yet marked.
            if stored is not None:
                log.warning("UIDVALIDITY changed (%s -> %s): resynchronising", stored, validity)
            criteria = "ALL" if self._cfg.imap.processed_folder else "UNSEEN"
            # Everything up to the baseline is handled by this pass (taken before the
            # search, so mail arriving meanwhile lies above it or in the search).
            baseline = await self._last_uid(session)
            if stored is None and self._cfg.imap.initial_sync == "none":
                uids = []
            else:
                uids = await session.search_uids(criteria)
                # The backlog the first start left unread is still unread: a renumbering
                # handed it all to the core, and every old mail was answered (session 27).
                uids = await self._without_backlog(session, criteria, uids, backlog)
            handled = await self.marks.among(session, criteria) if uids else set()
            if not await self._process(session, uids, validity, handled):
                return False
            await host.set_cursor("email", key_uid, str(max([baseline, *uids], default=0)))
            await host.set_cursor("email", key_validity, validity)
            return True
        last = int(await host.get_cursor("email", key_uid) or 0)
        uids = [u for u in await session.search_uids(f"UID {last + 1}:*") if u > last]
        # Above the cursor, yet marked handled: an earlier run answered it, and the
        # cursor went back (an older backup of the data directory restored; session 40).
        handled = await self.marks.among(session, f"UID {last + 1}:*") if uids else set()
        if not await self._process(session, uids, validity, handled, cursor=last):
            return False
        return await self._retry_unfetched(session, validity)

    @staticmethod
    async def _last_uid(session: ImapSession) -> int:
        """The UID of the folder's newest mail (``UIDNEXT - 1``)."""
        assert session.mailbox is not None
        last = session.mailbox.uidnext - 1
        if last < 0:  # the server sent no UIDNEXT
            last = max(await session.search_uids("ALL"), default=0)
        return last

    async def _backlog_before(self, first: bool) -> str:
        """The IMAP date before which mail in the folder is the backlog the first start
        found (``<folder>:backlog_before``): yesterday at the first start. A folder read
        before session 27, which kept no such date, gets the day before this version's
        first sync of it: unread mail older than that was left alone, or was the backlog."""
        if self._backlog is not None:
            return self._backlog
        key = f"{self._cfg.imap.folder}:backlog_before"
        stored = None if first else await self._host.get_cursor("email", key)
        if stored is None:
            day = utcnow().date() - timedelta(days=1)
            stored = f"{day.day}-{_MONTHS[day.month - 1]}-{day.year}"
            await self._host.set_cursor("email", key, stored)
        self._backlog = stored
        return stored

    async def _without_backlog(
        self, session: ImapSession, criteria: str, uids: list[int], before: str
    ) -> list[int]:
        """``uids`` without the mail that arrived before ``before`` (the server's arrival
        date, not the sender's Date). On the first start in a mailbox with years of
        unread mail, every one was answered, every stranger acknowledged and escalated;
        the backlog is left where it is, unread, for the owner's own mail client."""
        if not uids:
            return uids
        old = set(await session.search_uids(f"{criteria} BEFORE {before}"))
        if old:
            log.warning(
                "%d mail(s) in %s that arrived before %s left alone, not answered (the "
                "backlog the first start found; they stay unread in the folder)",
                len(old),
                self._cfg.imap.folder,
                before,
            )
        return [uid for uid in uids if uid not in old]

    async def _process(
        self,
        session: ImapSession,
        uids: list[int],
        validity: str,
        handled: set[int],
        cursor: int | None = None,
    ) -> bool:
        _, key_uid = self._keys()
        for uid in uids:
            if self._fetch_failures.get((validity, uid), 0) >= FETCH_ATTEMPTS:
                # Passed over so that it holds up no later mail, but recorded before
                # the cursor moves past it and retried later (it used to be lost).
                # Not marked: it stays unread, where the owner's own client shows it.
                await self.unfetched.failed(uid, self._fetch_failures[(validity, uid)])
                self._fetch_failures.pop((validity, uid), None)
            elif await self._fetch_and_deliver(session, uid, validity, uid in handled) is False:
                return False
            if cursor is not None:
                cursor = uid
                await self._host.set_cursor("email", key_uid, str(uid))
        return True

    async def _retry_unfetched(self, session: ImapSession, validity: str) -> bool:
        """Try again the passed-over mails whose pause is over (after the new mail, so a
        retry that ends the session again delays nothing newer)."""
        due = self.unfetched.due()
        # (a restore took the record of a mail passed over back, not the mail's later fate)
        marked = await self.marks.among(session, f"UID {','.join(map(str, due))}") if due else set()
        for uid in due:
            handled = await self._fetch_and_deliver(session, uid, validity, uid in marked)
            if handled is False:
                return False
            if handled is None:  # failed over again: a longer pause
                continue
            log.info(
                "mail uid %d in %s, passed over before, handled at last", uid, self._cfg.imap.folder
            )
            await self.unfetched.done(uid)
        return True

    async def _fetch_and_deliver(
        self, session: ImapSession, uid: int, validity: str, replayed: bool = False
    ) -> bool | None:
        """Fetch, deliver and mark one mail. False when the core did not store it (retry
        it next, before any later mail); None when it is passed over for now.
        ``replayed``: an earlier run handled it (recorded, never answered)."""
        self._fetching = (validity, uid)
        raw = await session.fetch(uid)
        self._fetching = None
        self._fetch_failures.pop((validity, uid), None)
        if raw is None:
            # Deleted or moved by another client between SEARCH and FETCH: nothing to
            # deliver or mark, and nothing lost that the owner did not remove.
            log.info(
                "mail uid %d in %s is gone (deleted or moved by another client before it "
                "was fetched): nothing to deliver",
                uid,
                self._cfg.imap.folder,
            )
            return True
        try:
            if not await self._deliver(raw, uid, validity, replayed):
                return False
        except Unstorable:
            return await self._unstorable(uid, validity)
        self._core_failures.pop((validity, uid), None)
        if replayed:
            self.marks.replayed += 1
        await self._mark(session, uid)
        return True

    async def _unstorable(self, uid: int, validity: str) -> bool | None:
        """The core failed over ``uid`` again. Retried at once it held up every later mail
        forever: after FETCH_ATTEMPTS failures in a row it is passed over like a mail the
        server would not hand over (recorded, left unread, retried after a pause)."""
        key = (validity, uid)
        failures = self._core_failures.get(key, 0) + 1
        self._core_failures = {key: failures}  # counts failures in a row
        if failures < FETCH_ATTEMPTS and uid not in self.unfetched:
            return False
        await self.unfetched.failed(uid, failures, unstorable=True)
        self._core_failures.pop(key, None)
        return None

    async def _unmarked(
        self, session: ImapSession, uid: int, folder: str | None, exc: CommandRefused
    ) -> bool:
        """A mail delivered but not moved (or flagged) as the server refused: flagged
        \\Seen instead where the MOVE was refused, the refusal kept for status."""
        action = f"move mail to {folder}" if folder else "flag mail \\Seen"
        problem = f"the IMAP server refuses to {action}: {exc.answer}; mail stays in the inbox"
        if problem != self.mark_problem:
            log.warning("mail uid %d is stored, but %s", uid, problem)
        self.mark_problem = problem
        if folder:
            try:
                return await session.mark_seen(uid, self.marks.keyword)
            except CommandRefused:
                return True  # stored, and left as it is
        return True

    async def _fetch_failed(self, validity: str, uid: int) -> None:
        failures = self._fetch_failures.get((validity, uid), 0) + 1
        self._fetch_failures = {(validity, uid): failures}  # counts failures in a row
        self._fetching = None
        unfetched = self.unfetched
        if unfetched.validity == validity and uid in unfetched:
            try:  # a passed-over mail's retry: a longer pause before the next
                await unfetched.failed(uid, failures)
            except Exception:  # unsaved, it is only retried sooner
                log.exception("could not record the failed retry of mail uid %d", uid)

    async def _mark(self, session: ImapSession, uid: int) -> None:
        folder = self._cfg.imap.processed_folder
        try:
            marked = (
                await session.move(uid, folder)
                if folder
                else await session.mark_seen(uid, self.marks.keyword)
            )
        except CommandRefused as exc:
            # The mail is stored: a refusal to move or flag it (an account over its
            # quota answers MOVE "NO [OVERQUOTA]") ended the session, the cursor stayed
            # before it, and every reconnect fetched it again, for ever, holding up
            # every later mail (session 38). It is left where it is, said once.
            marked = await self._unmarked(session, uid, folder, exc)
        else:
            self.mark_problem = None  # taken again: no longer a problem
        if not marked:  # delivered, then deleted elsewhere: nothing left to mark
            log.info(
                "mail uid %d in %s was deleted or moved by another client while it was "
                "being delivered: nothing to mark",
                uid,
                self._cfg.imap.folder,
            )
