"""Reliability suite, e-mail channel: kill -9 of the real daemon under a steady stream of
owner and stranger mails loses nothing and answers nothing twice.

The daemon runs as a child process (tests/ops/daemon.py) with only the e-mail channel,
against pymap (IMAP, a subprocess) and an aiosmtpd capture server (in the test's loop).
The test APPENDs mails to the watched folder the way an MTA delivers them, from a
connection of its own. For e-mail, ``\\Seen`` is the acknowledgement: the channel marks a
mail only once the core has made it durable.

To make the kills land in the interesting windows rather than in idle time: mail arrives
faster than the daemon answers (a backlog), the ``\\Seen`` marks pass through a proxy that
holds each for a moment and drops the held ones at the kill (a mail stored but not yet
acknowledged, which the restarted daemon fetches again), and the SMTP server keeps each
mail a moment before its 250 (a reply the server has but the outbox has not marked sent).

Checked at each kill (before any restart):

- every mail the daemon marked ``\\Seen`` is stored exactly once: an owner mail as a user
  turn of its thread's transcript, a stranger's (or a spoofed owner's) in its party record.

Checked after the restarts (once the daemon has caught up and exited on SIGTERM):

- nothing was skipped: every mail appended is ``\\Seen`` and stored exactly once,
  including those not yet acknowledged at a kill and those that arrived while the daemon
  was down;
- threads survive: an owner mail answering an earlier one joins its conversation;
- FTS matches the transcripts: every turn line is in ``turns`` with the same content, one
  FTS document per turn, each owner mail findable by its unique word, FTS5
  integrity-check ok (also through ``my-agent status``'s consistency report);
- no message is answered twice: one assistant turn per user turn, one outbox reply per
  user turn;
- no reply is sent twice: at the SMTP server each owner mail has exactly one reply
  (In-Reply-To = its Message-ID) and each stranger mail at most one acknowledgement. The
  one unavoidable exception (a kill between SMTP's 250 and the outbox's "sent" mark) is
  the same outbox entry sent again, with the same Message-ID, so the recipient's client
  shows it once; at most one such repeat per kill.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aioimaplib
import pytest

from bot import healthcheck
from bot.config import build_config
from bot.transcript_lines import recallable
from tests.channels.email.conftest import (
    USER,
    Capture,
    PymapServer,
    SmtpServer,
    create_folder,
    email_channel,
    imap_client,
    start_pymap,
    stop_pymap,
)
from tests.channels.email.helpers import mail_id, text_of
from tests.ops.daemon import DaemonProcess
from tests.ops.loopback import owner_turns, wait_until
from tests.ops.loopback import stored_stranger_ids as stored_stranger_keys
from tests.sqlite_driver import sqlite3

pytestmark = pytest.mark.slow

OWNER = "owner@example.org"
STRANGERS = ("alice@stranger.example", "bob@elsewhere.example")
GOOD_AUTH = "mx.example.com; dkim=pass header.d=example.org; spf=pass smtp.mailfrom=example.org"
SPOOF_AUTH = "mx.example.com; dkim=fail header.d=example.org; spf=fail smtp.mailfrom=evil.example"
THREADS = 3  # owner mail threads running in parallel
CRASHES = 2
STORED_BEFORE_KILL = 14  # mails stored in each round before the kill
APPEND_PAUSE = 0.02  # between two APPENDs: faster than the daemon answers, a backlog builds
SMTP_ANSWER_DELAY = 0.02
MARK_DELAY = 0.03  # the \Seen mark held this long on its way to the IMAP server


# -- servers -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pymap() -> Iterator[PymapServer]:
    server = start_pymap()
    yield server
    stop_pymap(server)


class SlowCapture(Capture):
    """Keeps each mail, then takes a moment before the 250: a kill often falls between the
    server having the mail and the daemon hearing so (the outbox's resend window)."""

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        answer = await super().handle_DATA(server, session, envelope)
        await asyncio.sleep(SMTP_ANSWER_DELAY)
        return answer


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpServer]:
    server = SmtpServer(SlowCapture())
    await server.start()
    yield server
    await server.stop()


class SlowMarkProxy:
    """A TCP proxy in front of pymap that holds each ``STORE`` (the ``\\Seen`` mark, the
    acknowledgement) for a moment, so that a kill usually falls while a mark is on its
    way: with :attr:`cut` the held mark is dropped (a mail stored by the daemon but not
    acknowledged, which a redelivery must not store twice), without it the mark lands
    after the kill (a mail acknowledged before it was durable would be lost)."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        # Set just before a kill: marks still held are dropped, as if the process had
        # died before writing them (the kernel would otherwise deliver what was written).
        self.cut = False
        self.holding = asyncio.Event()  # set while a mark is held

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, hold: bool) -> None:
            try:
                while data := await src.read(65536):
                    if hold and b" STORE " in data.upper():
                        self.holding.set()
                        await asyncio.sleep(self.delay)
                        self.holding.clear()
                        if self.cut:  # the daemon died first: the mark was never sent
                            break
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                if hold:  # the client is gone: let the server act on what it was sent
                    await asyncio.sleep(0.2)
                dst.close()

        for task in (
            asyncio.create_task(pipe(reader, up_writer, True)),
            asyncio.create_task(pipe(up_reader, writer, False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()


@pytest.fixture
async def imap_proxy(pymap: PymapServer) -> AsyncIterator[SlowMarkProxy]:
    proxy = SlowMarkProxy(pymap.port, MARK_DELAY)
    await proxy.start()
    yield proxy
    await proxy.stop()


def email_config(root: Path, imap_port: int, smtp_port: int, folder: str) -> dict[str, Any]:
    return {
        "data_dir": str(root / "data"),
        "brain": {"provider": "offline"},
        "embedding": {"enabled": False},
        "logging": {"level": "INFO"},
        "owner": {"identities": {"email": [OWNER]}},
        "trust": {"escalation_channel": "email"},
        "channels": {
            "web": {"enabled": False},
            "loopback": {"enabled": False},
            "email": email_channel(
                imap_port,
                smtp_port,
                folder,
                imap={"idle": True, "poll_interval": 0.5, "timeout": 10, "reconnect_max": 0.5},
                auth_serv_id="mx.example.com",
            ),
        },
    }


# -- the mail stream -----------------------------------------------------------------
class Mailer:
    """Appends a steady, deterministic mix of mails: owner mails in THREADS threads (each
    after the first answering the previous one), strangers, and a spoofed owner."""

    def __init__(
        self,
        client: aioimaplib.IMAP4,
        folder: str,
        connect: Callable[[], Awaitable[aioimaplib.IMAP4]] | None = None,
    ) -> None:
        self.client = client
        self.folder = folder
        self.connect = connect  # a fresh connection when this one is dropped
        self.n = 0
        self.kinds: dict[str, str] = {}  # Message-ID -> "owner" | "stranger"
        self.words: dict[str, str] = {}  # Message-ID -> the unique word in its body
        self.thread_of: dict[str, int] = {}  # owner Message-ID -> thread
        self._last: dict[int, list[str]] = defaultdict(list)  # thread -> its Message-IDs

    def _next(self) -> EmailMessage:
        self.n += 1
        n = self.n
        mid = f"<rel-{n}@{'example.org' if n % 2 else 'stranger.example'}>"
        word = f"zqx{n:04d}w"
        msg = EmailMessage()
        msg["To"] = f"My Assistant <{USER}>"
        msg["Message-ID"] = mid
        msg["Date"] = "Tue, 14 Jan 2025 09:12:00 +0100"
        if n % 2:  # owner, authenticated, in one of the threads
            thread = n // 2 % THREADS
            previous = self._last[thread]
            msg["From"] = f"Owner <{OWNER}>"
            msg["Authentication-Results"] = GOOD_AUTH
            msg["Subject"] = f"Re: Plan {thread}" if previous else f"Plan {thread}"
            if previous:
                msg["In-Reply-To"] = previous[-1]
                msg["References"] = " ".join(previous[-5:])
            previous.append(mid)
            self.kinds[mid] = "owner"
            self.thread_of[mid] = thread
        else:
            which = n // 2 % 3
            if which < 2:
                msg["From"] = STRANGERS[which]
            else:  # the owner's address without a passing check: a third party
                msg["From"] = f"Owner <{OWNER}>"
                msg["Authentication-Results"] = SPOOF_AUTH
            msg["Subject"] = f"Question {n}"
            self.kinds[mid] = "stranger"
        msg.set_content(f"Mail {n} about the garden {word}.\n\nBest,\nSomeone\n")
        self.words[mid] = word
        return msg

    async def append_one(self) -> None:
        """Append the next mail. The harness's own connection can be dropped on a loaded
        machine (an APPEND over aioimaplib's 5 s timeout leaves it in LOGOUT): then it
        reconnects, and appends again unless the mail landed (the injector used to die
        there, so no mail and no \\Seen mark came for the rest of the round)."""
        msg = self._next()
        for attempt in range(3):
            try:
                response = await self.client.append(msg.as_bytes(), mailbox=self.folder)
                assert response.result == "OK", response
                return
            except (TimeoutError, aioimaplib.Abort, aioimaplib.CommandTimeout, OSError):
                if self.connect is None or attempt == 2:
                    raise
            self.client = await self.connect()
            if await self._landed(str(msg["Message-ID"])):
                return

    async def _landed(self, message_id: str) -> bool:
        response = await self.client.select(self.folder)
        assert response.result == "OK", response
        response = await self.client.uid_search(
            "HEADER", "Message-ID", f'"{message_id}"', charset=None
        )
        return response.result == "OK" and bool(response.lines[0].strip())

    @property
    def owner_ids(self) -> set[str]:
        return {m for m, k in self.kinds.items() if k == "owner"}

    @property
    def stranger_ids(self) -> set[str]:
        return {m for m, k in self.kinds.items() if k == "stranger"}


_MSGID = re.compile(rb"Message-ID:\s*(<[^>]+>)", re.I)
_FETCH_LITERAL = re.compile(rb"^\d+ FETCH .*\{\d+\}$")


async def seen_state(port: int, folder: str) -> dict[str, bool]:
    """Message-ID -> whether the mail carries \\Seen, for every mail in ``folder``."""
    client = await imap_client(port)
    try:
        response = await client.select(folder)
        assert response.result == "OK", response
        response = await client.uid(
            "fetch", "1:*", "(UID FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])"
        )
        assert response.result == "OK", response
        out: dict[str, bool] = {}
        lines = response.lines
        for idx, line in enumerate(lines):
            if isinstance(line, bytearray) or not _FETCH_LITERAL.search(line):
                continue
            flags = bytes(line)
            header = bytes(lines[idx + 1]) if idx + 1 < len(lines) else b""
            if idx + 2 < len(lines):  # FLAGS may come after the literal
                flags += bytes(lines[idx + 2])
            match = _MSGID.search(header)
            assert match is not None, (line, header)
            out[match.group(1).decode()] = b"\\Seen" in flags
        return out
    finally:
        await client.logout()


# -- reading what the daemon left on disk ------------------------------------------------
def stored_owner_ids(data_dir: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for turns in owner_turns(data_dir).values():
        for t in turns:
            if t["role"] == "user":
                ids[mail_id((t.get("metadata") or {}).get("messageId"))] += 1
    return ids


def stored_stranger_ids(data_dir: Path) -> Counter[str]:
    """The Message-IDs of the strangers' mails on disk, each as often as it is stored
    (recorded by its dedup key, the Message-ID plus a content hash)."""
    ids: Counter[str] = Counter()
    for key, count in stored_stranger_keys(data_dir).items():
        ids[mail_id(key)] += count
    return ids


def stored(data_dir: Path) -> Counter[str]:
    return stored_owner_ids(data_dir) + stored_stranger_ids(data_dir)


def smtp_mails(capture: Capture) -> list[EmailMessage]:
    return [m for _, m in capture.messages]


def replies_by_parent(capture: Capture) -> dict[str, list[str]]:
    """In-Reply-To -> Message-IDs of the mails sent in reply to it (repeats kept)."""
    out: dict[str, list[str]] = defaultdict(list)
    for mail in smtp_mails(capture):
        parent = mail["In-Reply-To"]
        if parent:
            out[str(parent).strip()].append(str(mail["Message-ID"]).strip())
    return out


def check_fts(data_dir: Path, mailer: Mailer) -> None:
    """The index holds exactly the transcripts' turns, and FTS finds every owner mail."""
    by_ref = message_refs(data_dir)
    conn = sqlite3.connect(
        f"file:{data_dir / 'conversations' / 'conversations.db'}?mode=ro", uri=True
    )
    try:
        rows = {
            (conv, number, role): content
            for conv, number, role, content in conn.execute(
                "SELECT conversation_id, turn_number, role, content FROM turns"
            )
        }
        lines = {
            (conv, t["turnNumber"], t["role"]): t["content"]
            for conv, turns in owner_turns(data_dir).items()
            for t in turns
        }
        assert rows == lines, "the turns table differs from the transcripts"
        (docs,) = conn.execute("SELECT count(*) FROM turns_fts_docsize").fetchone()
        searchable = [t for turns in owner_turns(data_dir).values() for t in turns if recallable(t)]
        assert docs == len(searchable) == len(lines) // 2  # the offline replies are readouts
        for mid in mailer.owner_ids:
            hits = conn.execute(
                "SELECT t.conversation_id, t.turn_number FROM turns_fts f "
                "JOIN turns t ON t.id = f.rowid WHERE turns_fts MATCH ? AND t.role = 'user'",
                (f'"{mailer.words[mid]}"',),
            ).fetchall()
            assert len(hits) == 1, (mid, hits)
            assert hits[0][0] == by_ref[mid], (mid, hits)  # the thread's conversation
    finally:
        conn.close()


def message_refs(data_dir: Path) -> dict[str, str]:
    """E-mail Message-ID (received or sent) -> conversation id, from the index."""
    conn = sqlite3.connect(
        f"file:{data_dir / 'conversations' / 'conversations.db'}?mode=ro", uri=True
    )
    try:
        rows = conn.execute("SELECT ref, conversation_id FROM message_refs WHERE channel = 'email'")
        return {str(ref): str(conv) for ref, conv in rows}
    finally:
        conn.close()


def outbox_keys(data_dir: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        return [
            (str(k), str(s))
            for k, s in conn.execute(
                "SELECT dedup_key, status FROM outbox WHERE dedup_key IS NOT NULL"
            )
        ]
    finally:
        conn.close()


# -- the tests -----------------------------------------------------------------------
async def test_the_injector_survives_a_dropped_connection(pymap: PymapServer) -> None:
    """The harness itself (regression: a dropped appender connection ended the injector,
    and the round waited 30 s for a \\Seen mark that could not come)."""
    folder = await create_folder(pymap.port)
    first = await imap_client(pymap.port)
    # Commands on the dropped connection time out quickly; the hello and the login keep
    # the usual timeout (a 0.5 s login failed now and then with the machine idle).
    first.timeout = 0.5
    mailer = Mailer(first, folder, lambda: imap_client(pymap.port))
    try:
        await mailer.append_one()
        dropped = mailer.client
        dropped.protocol.transport.abort()  # the connection is gone
        await asyncio.sleep(0.05)
        await mailer.append_one()
        await mailer.append_one()
        assert sorted(await seen_state(pymap.port, folder)) == sorted(mailer.kinds)
        assert len(mailer.kinds) == 3
    finally:
        await mailer.client.logout()


async def test_kill9_with_email_loses_nothing(
    tmp_path: Path,
    pymap: PymapServer,
    imap_proxy: SlowMarkProxy,
    smtp: SmtpServer,
    daemons: list[DaemonProcess],
) -> None:
    folder = await create_folder(pymap.port)
    config = email_config(tmp_path, imap_proxy.port, smtp.port, folder)
    daemon = DaemonProcess(tmp_path, config)
    daemons.append(daemon)
    data = daemon.data_dir
    mailer = Mailer(await imap_client(pymap.port), folder, lambda: imap_client(pymap.port))
    stop = asyncio.Event()
    unacknowledged: set[str] = set()  # not \Seen at some kill

    async def inject() -> None:
        while not stop.is_set():
            await mailer.append_one()
            await asyncio.sleep(APPEND_PAUSE)

    try:
        for round_ in range(CRASHES):
            imap_proxy.cut = False
            await daemon.start(timeout=60)
            stop.clear()
            injector = asyncio.create_task(inject())
            target = sum(stored(data).values()) + STORED_BEFORE_KILL
            await wait_until(
                lambda t=target: sum(stored(data).values()) >= t, 30, "a steady load", daemon
            )
            # Even rounds: the marks still held never reach the server (a mail stored but
            # not acknowledged). Odd rounds: they do, after the kill, as the kernel would
            # deliver what the process wrote (a mail acknowledged too early would show).
            imap_proxy.cut = round_ % 2 == 0
            await asyncio.wait_for(imap_proxy.holding.wait(), 30)  # a mark on its way
            await daemon.kill9()  # mid-flight: fetches, appends, replies and sends
            await asyncio.sleep(0.3)  # mail keeps arriving while the daemon is down
            stop.set()
            await injector
            # Acknowledged means durable: every mail marked \Seen is stored, once.
            state = await seen_state(pymap.port, folder)
            assert set(state) == set(mailer.kinds)
            on_disk = stored(data)
            seen = [m for m, s in state.items() if s]
            assert seen and [m for m in seen if on_disk[m] != 1] == []
            pending = [m for m, s in state.items() if not s]
            assert pending  # mail left for the restart (some of it stored already)
            unacknowledged.update(pending)

        imap_proxy.cut = False
        await daemon.start(timeout=60)
        # Nothing skipped: every mail gets acknowledged and stored after the restart ...
        await wait_until(
            lambda: _all_seen(pymap.port, folder), 30, "every mail marked \\Seen", daemon
        )
        # ... and every owner mail answered.
        owners = mailer.owner_ids
        await wait_until(
            lambda: owners <= set(replies_by_parent(smtp.capture)),
            30,
            "a reply to every owner mail",
            daemon,
        )
        assert await daemon.terminate() == 0, daemon.log()
    finally:
        await mailer.client.logout()

    # Every mail stored exactly once, where it belongs.
    owner_stored = stored_owner_ids(data)
    assert {m: owner_stored[m] for m in owners if owner_stored[m] != 1} == {}
    assert set(owner_stored) == owners, "unexpected owner turns"
    strangers = stored_stranger_ids(data)
    assert {m: strangers[m] for m in mailer.stranger_ids if strangers[m] != 1} == {}
    assert set(strangers) == mailer.stranger_ids
    everything = owner_stored + strangers
    assert [m for m in unacknowledged if everything[m] != 1] == [], "skipped after a kill"

    # Threads survived the kills: one conversation per thread, its mails in order (the
    # escalations to the owner have a conversation of their own, without turns).
    convs: dict[str, list[str]] = {}
    for conv_id, turns in owner_turns(data).items():
        if mids := [mail_id(t["metadata"]["messageId"]) for t in turns if t["role"] == "user"]:
            convs[conv_id] = mids
    assert len(convs) == THREADS, convs
    for mids in convs.values():
        assert len({mailer.thread_of[m] for m in mids}) == 1, mids
        assert mids == sorted(mids, key=lambda m: int(m.split("-")[1].split("@")[0]))

    # No message answered twice: one assistant turn per user turn, one outbox reply each.
    outbox = outbox_keys(data)
    assert [k for k, n in Counter(k for k, _ in outbox).items() if n > 1] == []
    for conv_id, turns in owner_turns(data).items():
        users = Counter(t["turnNumber"] for t in turns if t["role"] == "user")
        answers = Counter(t["turnNumber"] for t in turns if t["role"] == "assistant")
        assert all(n == 1 for n in users.values()), (conv_id, users)
        assert answers == users, (conv_id, users, answers)
        for number in users:
            assert (f"{conv_id}:{number}:reply", "sent") in outbox

    # No reply sent twice: one distinct reply per owner mail, at most one acknowledgement
    # per stranger mail. A repeat is only ever the same outbox entry sent again (same
    # Message-ID, shown once by the client) after a kill between SMTP's 250 and the
    # outbox's "sent" mark: at most one per kill.
    mails = smtp_mails(smtp.capture)
    distinct = {parent: set(ids) for parent, ids in replies_by_parent(smtp.capture).items()}
    assert {m: distinct[m] for m in owners if len(distinct[m]) != 1} == {}
    assert {m: distinct[m] for m in mailer.stranger_ids if len(distinct.get(m, ())) > 1} == {}
    assert set(distinct) <= set(mailer.kinds), "a reply to a mail nobody sent"
    ids = Counter(str(m["Message-ID"]).strip() for m in mails)
    assert sum(n - 1 for n in ids.values()) <= CRASHES, ids.most_common(3)
    # Strangers: an acknowledgement at most once per party per escalation interval (one
    # more per kill if it fell between the acknowledgement and its escalation record).
    acks = Counter(str(m["To"]).lower() for m in mails if m["Auto-Submitted"])
    assert len(acks) == 3 and max(acks.values()) <= 1 + CRASHES, acks
    # One escalation to the owner per party (the same tolerance), and never threaded.
    escalations: dict[str, set[str]] = defaultdict(set)
    for mail in mails:
        if not mail["In-Reply-To"] and not mail["Auto-Submitted"]:
            escalations[str(mail["Subject"])].add(str(mail["Message-ID"]))
            assert OWNER in str(mail["To"]).lower() and "/trust p" in text_of(mail)
    assert len(escalations) == 3, escalations
    assert max(len(ids) for ids in escalations.values()) <= 1 + CRASHES, escalations
    # Each reply is in the owner mail's thread: threaded headers, and its Message-ID
    # recorded with the same conversation (so the owner's answer to it finds the thread).
    refs = message_refs(data)
    for mail in mails:
        parent = str(mail["In-Reply-To"] or "").strip()
        if parent in owners:
            assert OWNER in str(mail["To"]).lower() and parent in str(mail["References"])
            assert refs[str(mail["Message-ID"]).strip()] == refs[parent], parent

    # FTS matches the transcripts (directly, and as `my-agent status` reports it).
    check_fts(data, mailer)
    index = healthcheck.collect(build_config(config, env={}))["index"]
    assert index["ok"] and index["fts_integrity"] == "ok", index
    assert index["transcript_turns"] == index["index_turns"]
    # the offline brain's replies are readouts, kept out of FTS (bot.transcript_lines.recallable)
    searchable = sum(recallable(t) for turns in owner_turns(data).values() for t in turns)
    assert index["fts_documents"] == index["searchable_turns"] == searchable


async def _all_seen(port: int, folder: str) -> bool:
    return all((await seen_state(port, folder)).values())
