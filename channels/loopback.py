"""The loopback channel: a local HTTP ingress for scripts, benchmarks and tests.

Listens on 127.0.0.1 only, and hears local scripts only (never a web page: see
``local_request_problem``). ``POST /inbound`` with a JSON message answers 200 once the
message is durable, so a client knows exactly which messages were acknowledged; 202 when
the disk refused it but the daemon holds it in memory and stores it (and answers it) as
soon as the disk has room (bot/spool.py): do not send it again; 503 when it was not
taken at all (the daemon is stopping): send it again. Every answer carries the
``message_id``: a message sent again with the same id is stored once (without one, each
POST gets a fresh id, and a retry of a held message was stored twice). Everything the
daemon "sends" through this channel is appended durably to
``data_dir/loopback-sent.jsonl``, which ``GET /sent`` returns: tests count sends across
crashes with it. Past ``channels.loopback.sent_max_bytes`` it is cut, atomically, to its
latest lines (half that size).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from bot.channel import ChannelHost, DeliveryError
from bot.config import AppConfig
from bot.durable_files import replace_durably
from bot.events import InboundMessage, OutboundMessage, SendResult, iso, utcnow
from bot.spool import HeldForRetry

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.channels.loopback")

# Sends remembered to skip a resend: one after a crash is of the rows the outbox was
# sending when it stopped, the latest ones.
DELIVERED = 1024

# Lines kept when loopback-sent.jsonl is cut, whatever their size: the latest sends
# read back at start to skip a resend (DELIVERED) come first.
KEEP_AT_LEAST = DELIVERED


class LoopbackChannel:
    name = "loopback"
    supports_streaming = False

    def __init__(self, config: AppConfig, services: Services | None = None) -> None:
        self.config = config
        self.section = config.channels.loopback
        self.sent_path = config.data_dir / "loopback-sent.jsonl"
        self.port_path = config.data_dir / "loopback.port"
        self._host: ChannelHost | None = None
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self.port: int | None = None
        self.started = False
        # (outbox id, what it said) -> ref of what was already delivered: the receiver is
        # idempotent, so a resend after a crash between the send and the outbox's "sent"
        # mark is a no-op. The content is part of the key: a lost or replaced state.db
        # numbers the outbox from 1 again, and the id alone silently dropped every new
        # message that reused one. The latest DELIVERED sends, the content by its hash:
        # before session 41 every message ever sent was kept whole (and every line of
        # loopback-sent.jsonl at start), for the life of the daemon.
        self._delivered: OrderedDict[tuple[int, bytes], str] = OrderedDict()

    async def start(self, host: ChannelHost) -> None:
        self._host = host
        for line in read_json_lines(self.sent_path, last=DELIVERED):
            if isinstance(line.get("outbox"), int):
                self._remember((line["outbox"], _fingerprint(line)), str(line.get("ref")))
        app = web.Application(client_max_size=4 * 1024 * 1024, middlewares=[self._local_only])
        app.router.add_post("/inbound", self._inbound)
        app.router.add_get("/sent", self._sent)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.section.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.section.port
        self.port_path.write_text(str(self.port))
        self.started = True
        log.info("loopback channel on 127.0.0.1:%s", self.port)

    async def stop(self) -> None:
        self.started = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def send(self, message: OutboundMessage) -> SendResult:
        ref = f"loop-{uuid.uuid4().hex[:12]}"
        record = {
            "ref": ref,
            "chat": message.chat_id,
            "text": message.text,
            "kind": message.kind,
            "conversation": message.conversation_id,
            "party": message.party_id,
            "outbox": message.outbox_id,
            "inReplyTo": message.in_reply_to,
            "actions": [list(a) for a in message.actions],
            "timestamp": iso(utcnow()),
        }
        key = (message.outbox_id, _fingerprint(record)) if message.outbox_id is not None else None
        if key is not None and key in self._delivered:
            log.info("outbox %s was delivered before a crash: not sent again", message.outbox_id)
            return SendResult(message_ref=self._delivered[key])
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        async with self._lock:
            size = await asyncio.to_thread(_append_durably, str(self.sent_path), data)
            limit = self.section.sent_max_bytes
            if limit and size > limit:
                await asyncio.to_thread(self._cut, limit)
        if key is not None:
            self._remember(key, ref)
        return SendResult(message_ref=ref)

    def _cut(self, limit: int) -> None:
        """Cut loopback-sent.jsonl to its latest lines, once it passed ``limit``
        (``sent_max_bytes``): before session 42 it grew for the life of the data
        directory, and ``GET /sent`` and every start read it whole. The send is durable
        before this runs, so a cut that fails (a full disk) is logged, not the send's
        failure."""
        try:
            kept = cut_to_latest(self.sent_path, limit // 2, KEEP_AT_LEAST)
        except OSError as exc:
            log.warning("cannot cut %s to its latest lines: %s", self.sent_path, exc)
            return
        log.info("%s cut to its latest %d lines", self.sent_path.name, kept)

    def _remember(self, key: tuple[int, bytes], ref: str) -> None:
        """Record a send (the latest :data:`DELIVERED` are kept)."""
        self._delivered[key] = ref
        self._delivered.move_to_end(key)
        while len(self._delivered) > DELIVERED:
            self._delivered.popitem(last=False)

    @web.middleware
    async def _local_only(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Only a local script, never a web page: a page the owner opens could POST
        messages as the owner (a form's text/plain body was read as JSON), and one whose
        name is rebound to 127.0.0.1 could read ``/sent``. A browser names its page in
        ``Origin`` and cannot send JSON elsewhere without asking; a rebound name is in
        ``Host``."""
        problem = local_request_problem(request, self.port)
        if problem is not None:
            log.warning("loopback request refused: %s", problem)
            return web.json_response({"ok": False, "error": problem}, status=403)
        return await handler(request)

    async def _inbound(self, request: web.Request) -> web.Response:
        try:
            body: dict[str, Any] = await request.json()
            sender = str(body["sender"])
            text = str(body["text"])
        except (ValueError, KeyError, TypeError, RecursionError):  # (deeply nested JSON)
            return web.json_response(
                {"ok": False, "error": "need JSON with sender and text"}, status=400
            )
        message = InboundMessage(
            channel=self.name,
            sender_id=sender,
            text=text,
            message_id=str(body.get("message_id") or uuid.uuid4().hex),
            chat_id=str(body.get("chat_id") or sender),
            sender_name=body.get("sender_name"),
            group_id=body.get("group_id"),
            group_title=body.get("group_title"),
            addressed=bool(body.get("addressed", True)),
        )
        assert self._host is not None
        mid = message.message_id
        try:
            await self._host.deliver(message)
        except HeldForRetry as exc:
            # Held by the spool, stored as soon as the disk has room: a 503 ("retry")
            # made a client send it again under a new id, and it was stored twice.
            body = {"ok": True, "held": True, "message_id": mid, "error": str(exc)}
            return web.json_response(body, status=202)
        except DeliveryError as exc:
            body = {"ok": False, "message_id": mid, "error": str(exc)}
            return web.json_response(body, status=503)
        return web.json_response({"ok": True, "message_id": mid})

    async def _sent(self, request: web.Request) -> web.Response:
        try:
            raw = await asyncio.to_thread(self.sent_path.read_bytes)
        except FileNotFoundError:
            raw = b""
        items = []
        for line in raw.splitlines():
            try:
                items.append(json.loads(line))
            except ValueError:
                continue
        return web.json_response(items)


LOCAL_HOSTS = ("127.0.0.1", "localhost")


def local_request_problem(request: web.Request, port: int | None) -> str | None:
    """Why ``request`` is not a local script's (None when it is)."""
    if request.headers.get("Origin") is not None:
        return "a web page's request (Origin)"
    host = request.host.lower()
    if host not in LOCAL_HOSTS and host not in {f"{h}:{port}" for h in LOCAL_HOSTS}:
        return f"Host {request.host!r} is not 127.0.0.1"
    if request.method == "POST" and request.content_type != "application/json":
        return "Content-Type must be application/json"
    return None


def _fingerprint(record: dict[str, Any]) -> bytes:
    """A hash of what a sent record said and where to: the same outbox entry sent again
    matches."""
    fields = ("chat", "text", "kind", "conversation", "party", "inReplyTo")
    said = json.dumps([record.get(f) for f in fields], ensure_ascii=False)
    return hashlib.blake2b(said.encode(), digest_size=16).digest()


def _append_durably(path: str, data: bytes) -> int:
    """Append ``data`` whole and fsync it, or leave the file as it was and raise: a short
    write (a full disk) used to count as sent and left a torn record that swallowed the
    next one. Returns the file's size after it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)  # the send fails whole; the outbox tries it again
            raise
    finally:
        os.close(fd)
    return start + len(data)


def cut_to_latest(path: Path, keep_bytes: int, keep_lines: int) -> int:
    """Replace ``path`` with its latest whole lines: as many as fit in ``keep_bytes``, but
    at least ``keep_lines`` (as many as it has). Atomic (a copy fsynced, then renamed
    over it): a reader sees the old file or the new one, never a part. Returns the lines
    kept."""
    lines = path.read_bytes().splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()  # a torn last record is no send (_append_durably never leaves one)
    kept = 0
    size = 0
    for line in reversed(lines):
        if kept >= keep_lines and size + len(line) > keep_bytes:
            break
        kept += 1
        size += len(line)
    replace_durably(path, b"".join(lines[len(lines) - kept :]))
    return kept


def read_json_lines(path: Path, last: int | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping torn or corrupt lines ([] if missing);
    of its ``last`` lines only when given."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    lines = raw.splitlines()
    for line in lines[-last:] if last else lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
