"""Our keyword on handled mail (channels/email/handled.py): which servers keep it, what is
set with \\Seen, which mails above the cursor an earlier run handled, and what the owner
is told of them (the end to end is test_e2e_restore.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from channels.email.handled import HANDLED, HandledMarks, keeps_keyword
from channels.email.imap import Mailbox
from channels.email.imap_wire import permanent_flags
from channels.email.inbox import Inbox
from tests.channels.email.conftest import FakeHost
from tests.channels.email.test_adapter import make_config

DOVECOT = b"OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*)] Flags"
EXCHANGE = b"OK [PERMANENTFLAGS (\\Seen \\Answered \\Flagged \\Deleted \\Draft $MDNSent)]"


def _mailbox(*lines: bytes) -> Mailbox:
    return Mailbox("INBOX", 7, 101, permanent_flags(list(lines)))


@pytest.mark.parametrize(
    ("lines", "kept"),
    [
        ((b"* FLAGS (\\Seen)", DOVECOT, b"OK [UIDVALIDITY 7]"), True),  # any new keyword
        ((EXCHANGE,), False),  # a fixed set without ours
        ((f"OK [PERMANENTFLAGS (\\Seen {HANDLED.lower()})]".encode(),), True),  # ours named
        ((b"OK [UIDVALIDITY 7]",), False),  # nothing said: not counted on
        ((b"OK [PERMANENTFLAGS ()] Read-only",), False),
    ],
)
def test_which_servers_keep_the_keyword(lines: tuple[bytes, ...], kept: bool) -> None:
    assert keeps_keyword(_mailbox(*lines)) is kept


def test_the_permanent_flags_of_a_select() -> None:
    assert permanent_flags([b"* 3 EXISTS", EXCHANGE]) == frozenset(
        {"\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft", "$MDNSent"}
    )
    assert permanent_flags([b"* 3 EXISTS"]) is None


class Session:
    """What HandledMarks and Inbox._mark ask of an IMAP session."""

    def __init__(self, marked: set[int]) -> None:
        self.marked = marked
        self.searches: list[str] = []
        self.stored: list[tuple[int, str | None]] = []

    async def search_uids(self, criteria: str) -> list[int]:
        self.searches.append(criteria)
        return sorted(self.marked)

    async def mark_seen(self, uid: int, keyword: str | None = None) -> bool:
        self.stored.append((uid, keyword))
        return True


async def test_a_server_keeping_no_keywords_is_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "my_agent.email")
    marks = HandledMarks(FakeHost(), "INBOX")
    session: Any = Session({102})
    for _ in range(3):  # every check, every reconnect
        marks.selected(_mailbox(EXCHANGE))
        assert await marks.among(session, "UID 101:*") == set()
    assert marks.keyword is None and session.searches == []  # never asked
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "keeps no keywords in INBOX" in warning and "$MDNSent" in warning


async def test_the_mails_an_earlier_run_handled_and_the_owners_notice() -> None:
    host = FakeHost()
    marks = HandledMarks(host, "INBOX")
    marks.selected(_mailbox(DOVECOT))
    session: Any = Session({102, 104})
    assert await marks.among(session, "UID 101:*") == {102, 104}
    assert session.searches == [f"UID 101:* KEYWORD {HANDLED}"]
    assert marks.keyword == HANDLED
    await marks.tell()  # none came again: nothing said
    assert host.told == []
    marks.replayed = 2
    await marks.tell()
    await marks.tell()  # told once
    (told,) = host.told
    assert told.startswith("2 mails in INBOX that this assistant had handled before")
    assert "restored from an older backup" in told


@pytest.mark.parametrize("flags", [DOVECOT, EXCHANGE])
async def test_the_keyword_goes_with_seen_where_it_is_kept(tmp_path: Path, flags: bytes) -> None:
    config = make_config(tmp_path, 1, 1, "INBOX")
    inbox = Inbox(config.channels.email, host=FakeHost(), deliver=None)  # type: ignore[arg-type]
    inbox.marks.selected(_mailbox(flags))
    session: Any = Session(set())
    await inbox._mark(session, 101)
    assert session.stored == [(101, HANDLED if flags is DOVECOT else None)]
