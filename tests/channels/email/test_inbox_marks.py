"""A mail stored, then refused its move or its \\Seen flag by the server (bot's side of
channels/email/inbox.py): left where it is, said once in the channel's problems, and
never fetched again for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channels.email.imap_wire import CommandRefused
from channels.email.inbox import Inbox
from tests.channels.email.test_adapter import make_config

QUOTA = "NO [OVERQUOTA] Quota exceeded"


class RefusingSession:
    """MOVE (and with ``flags``, STORE too) refused as an account over its quota does."""

    def __init__(self, *, flags: bool = False) -> None:
        self.flags = flags
        self.seen: list[int] = []

    async def move(self, uid: int, folder: str) -> bool:
        raise CommandRefused(f"MOVE {uid} failed", QUOTA)

    async def mark_seen(self, uid: int, keyword: str | None = None) -> bool:
        if self.flags:
            raise CommandRefused(f"STORE {uid} failed", QUOTA)
        self.seen.append(uid)
        return True


def _inbox(tmp_path: Path, processed: str | None) -> Inbox:
    config = make_config(tmp_path, 1, 1, "INBOX", imap={"processed_folder": processed})
    return Inbox(config.channels.email, host=None, deliver=None)  # type: ignore[arg-type]


async def test_a_refused_move_leaves_the_mail_seen_in_the_inbox(tmp_path: Path) -> None:
    # Regression: MOVE refused ("NO [OVERQUOTA]") after the mail was stored ended the
    # session before the cursor moved past it: every reconnect fetched it again, for
    # ever, and no later mail was read.
    inbox = _inbox(tmp_path, "Processed")
    session: Any = RefusingSession()
    await inbox._mark(session, 101)
    await inbox._mark(session, 102)
    assert session.seen == [101, 102]
    assert inbox.mark_problem is not None
    assert "refuses to move mail to Processed: NO [OVERQUOTA]" in inbox.mark_problem


async def test_a_refused_flag_is_said_and_passed(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path, None)
    await inbox._mark(RefusingSession(flags=True), 101)  # type: ignore[arg-type]
    assert inbox.mark_problem is not None and "flag mail \\Seen" in inbox.mark_problem

    class Taking(RefusingSession):
        async def mark_seen(self, uid: int, keyword: str | None = None) -> bool:
            return True

    await inbox._mark(Taking(), 102)  # type: ignore[arg-type]
    assert inbox.mark_problem is None  # taken again: no longer a problem
