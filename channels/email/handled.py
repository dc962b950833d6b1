"""Which mail an earlier run of this assistant handled: a private IMAP keyword on it.

What the channel has read is kept in ``state.db`` (the UID cursor) and the index (the
mails' keys). Restore an older backup of the data directory, and both go back in time
while the mailbox does not: every mail received since the backup lay above the cursor
again, unknown to the index, and was answered a second time, every stranger
acknowledged and escalated again (a week-old backup: a week of mail; session 40).

Each mail is therefore marked on the server with :data:`HANDLED` together with its
``\\Seen``, once the core has made it durable. Mail above the cursor that carries the
keyword was handled by an earlier run: it is handed to the core as ``replayed``
(recorded where the store lacks it, never answered, acknowledged nor escalated), and the
owner is told once per check how many came so. \\Seen alone cannot say it: the owner
reading mail on a phone while the daemon is down sets it too, and those mails want
their answers. A server that keeps no keywords (``PERMANENTFLAGS`` naming neither
``\\*`` nor the keyword: Exchange, Outlook.com) gets \\Seen as before, and a warning,
once, that a restore may answer mail again. A mail moved to ``imap.processed_folder``
leaves the folder and is not read again in any case.
"""

from __future__ import annotations

import logging

from bot.channel import ChannelHost
from channels.email.imap import ImapSession, Mailbox

log = logging.getLogger("my_agent.email")

# Private to this assistant (RFC 3501 keywords starting with "$" are by convention
# those of a program, not the user's own labels).
HANDLED = "$MyAgentHandled"


def keeps_keyword(mailbox: Mailbox) -> bool:
    """Whether the server keeps :data:`HANDLED` on a mail of ``mailbox`` (its SELECT
    said ``\\*``, any new keyword, or named this one). A server that did not say is
    taken as keeping none: a keyword it drops would only give a false assurance."""
    if mailbox.permanent_flags is None:
        return False
    flags = {flag.lower() for flag in mailbox.permanent_flags}
    return "\\*" in flags or HANDLED.lower() in flags


class HandledMarks:
    """The keyword's use in one folder: whether this session's server keeps it, which
    mails above the cursor carry it, and the owner's notice of those that came again."""

    def __init__(self, host: ChannelHost, folder: str) -> None:
        self._host = host
        self._folder = folder
        self.kept = False  # the current session's server keeps the keyword
        self._warned = False  # the warning that it does not, given (once per run)
        self.replayed = 0  # handled mails that came again, not yet told

    def selected(self, mailbox: Mailbox) -> None:
        """A session selected the folder: does its server keep the keyword?"""
        self.kept = keeps_keyword(mailbox)
        if not self.kept and not self._warned:
            self._warned = True
            log.warning(
                "the IMAP server keeps no keywords in %s (PERMANENTFLAGS %s): mail is "
                "marked \\Seen only, and restoring an older backup of the data directory "
                "would answer again the mail received since",
                self._folder,
                " ".join(sorted(mailbox.permanent_flags or ())) or "not given",
            )

    @property
    def keyword(self) -> str | None:
        """The keyword to set with \\Seen (None where the server would not keep it)."""
        return HANDLED if self.kept else None

    async def among(self, session: ImapSession, criteria: str) -> set[int]:
        """The UIDs matching ``criteria`` that carry the keyword (none where the server
        keeps no keywords)."""
        if not self.kept:
            return set()
        return set(await session.search_uids(f"{criteria} KEYWORD {HANDLED}"))

    async def tell(self) -> None:
        """Tell the owner, once for the check that found them, of the mails an earlier
        run had handled that came again."""
        count, self.replayed = self.replayed, 0
        if not count:
            return
        mails = "1 mail" if count == 1 else f"{count} mails"
        await self._host.tell_owner(
            "email",
            f"{mails} in {self._folder} that this assistant had handled before came "
            "again (the stored state said they were not read yet): recorded where they "
            "were missing, not answered, acknowledged or escalated again. Was the data "
            "directory restored from an older backup? The answers sent then are not in "
            "the transcripts.",
        )
