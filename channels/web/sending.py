"""The owner's message from a tab, on its way to the core (``send_message``).

Which conversation it goes to (the one named, the one in view, a new one from the empty
chat, or none for a command answered without one), the refusals the page can act on
(each names the message's ``ref`` so the page puts the text back in the box), and
delivery through the channel host. The rest of the protocol is :mod:`channels.web.ws`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from bot.channel import DeliveryError
from bot.command_status import missing_model_ids
from bot.commands import is_detached, model_answer, parse_command, rename_answer
from bot.events import InboundMessage
from bot.model_switch import model_refusal
from bot.previous_conversation import STARTED_AFTER
from bot.spool import HeldForRetry
from channels.web.tabs import Client
from channels.web.views import conversation_meta

if TYPE_CHECKING:
    from channels.web.ws import WsHub

log = logging.getLogger("my_agent.web")

NEXT_CONVERSATION = "the conversation your first message here starts"
REFS_KEPT = 256  # per hub: the refs a reconnecting tab may send again


class SentRefs:
    """Whether each message a session's tabs sent lately (by its ``ref``) was stored.

    A tab whose socket dropped before it heard back, and found no sign of its message
    in the reloaded view, sends it again under the same ref. The view can lag a
    message that was still being stored when the socket dropped: answered from here,
    that one is stored once (the second send waits for the first's outcome)."""

    def __init__(self, kept: int = REFS_KEPT) -> None:
        self._kept = kept
        self._outcomes: OrderedDict[tuple[str, str], asyncio.Future[bool]] = OrderedDict()

    def outcome(self, key: tuple[str, str]) -> asyncio.Future[bool] | None:
        """The outcome of the message sent under ``key`` before, if it is remembered."""
        return self._outcomes.get(key)

    def start(self, key: tuple[str, str]) -> asyncio.Future[bool]:
        """Remember the message under ``key``; resolve the future once it is settled."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._outcomes[key] = future
        self._outcomes.move_to_end(key)
        while len(self._outcomes) > self._kept:
            self._outcomes.popitem(last=False)
        return future


async def send_message(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """Deliver the owner's message to the core: into the conversation the tab names or
    views, into a new one from the empty chat, or none (``/search``, ``/help``,
    ``/status`` there). Answered ``accepted {ref}`` once stored, ``error {ref, kept}`` if
    not; a ref seen before and stored is answered ``accepted`` and not stored again."""
    text = str(data.get("text") or "")
    if not text.strip():
        return
    # The page's name for this message: answered "accepted" once it is stored, or
    # named in the error that refused it, so the page can put the text back in the
    # box (it cleared the box on sending, and a refusal lost the text).
    given = data.get("ref")
    ref = given[:64] if isinstance(given, str) else None
    if ref is None:
        await _send(hub, client, data, text, None)
        return
    key = (client.session or "", ref)
    earlier = hub.sent_refs.outcome(key)
    if earlier is not None and await asyncio.shield(earlier):
        log.info("web: message %s sent again after a reconnect, stored once", ref)
        accepted(hub, client, ref)
        return
    outcome = hub.sent_refs.start(key)
    stored = False
    try:
        stored = await _send(hub, client, data, text, ref)
    finally:
        outcome.set_result(stored)


async def _send(
    hub: WsHub, client: Client, data: dict[str, Any], text: str, ref: str | None
) -> bool:
    """``send_message`` for one message; whether it was stored."""

    def refuse(message: str, kept: bool = False) -> bool:
        frame: dict[str, Any] = {"type": "error", "message": message}
        if ref is not None:
            frame.update(ref=ref, kept=kept)
        hub.send(client, frame)
        # Not stored, also when kept: the page sends a kept message again after a
        # reconnect until it hears "accepted"; answered so from SentRefs, one the daemon
        # still held (and could lose) was dropped by the page (session 39).
        return False

    # The message's id is its page's ref: a tab sending a held message again after a
    # restart of the daemon (whose memory of refs, SentRefs, went with it) has it found
    # stored (the router's message refs) instead of stored twice; before, the page
    # guessed from the reloaded view by the text alone, and dropped a held "Yes" that a
    # turn before had said too (session 38).
    message_id = f"web-{ref}" if ref else f"web-{uuid.uuid4()}"
    if ref and await hub.services.index.conversation_for_ref("web", message_id):
        log.info("web: message %s was stored before a restart: not stored again", ref)
        return accepted(hub, client, ref)
    cid = data.get("conversationId") or client.conversation_id
    if cid:
        rec = await hub.services.conversations.get(str(cid))
        if rec is None:
            return refuse("no such conversation")
        if conversation_meta(rec)["readOnly"]:
            return refuse("this conversation belongs to its channel and is read-only")
    elif (command := parse_command(text) or ("", ""))[0] and is_detached(command[0]):
        # /search, /help, /status, /trust, /block, /reply or an unknown command in a new
        # chat: answered, no conversation (session 39 for the party commands)
        rec = None
    elif command[0] in ("model", "rename"):
        await pending_answer(hub, client, command)
        return accepted(hub, client, ref)
    elif command[0] == "new" and not command[1]:
        # A new chat is already a fresh start: /new here created a conversation only
        # to record the command in, and left it empty in the list.
        await hub.load(client, None)
        return accepted(hub, client, ref)
    else:
        if command[0] == "new":
            # "/new <first message>" in a new chat: that message starts the chat.
            # Run as a command it created two conversations, the first one empty.
            text = command[1]
        rec = await hub.channel.create_web_conversation(client.pending_model, client.pending_title)
        client.pending_model = client.pending_title = None
        if client.left is not None:
            # the dashboard's new chat is a /new: its first replies name the conversation
            # left, for "what were we just talking about?" (session 41)
            await hub.services.conversations.append_event(
                rec.id, STARTED_AFTER, previousId=client.left
            )
            client.left = None
        await hub.load(client, rec.id)
    host = hub.channel.host
    if host is None:
        return refuse("not ready")
    try:
        await host.deliver(
            InboundMessage(
                channel="web",
                sender_id="owner",
                chat_id=client.id,
                text=text,
                message_id=message_id,
                conversation_id=rec.id if rec is not None else None,
                sender_name=hub.channel.config.owner.name,
            )
        )
    except DeliveryError as exc:  # read-only, shutting down, storage full
        # A storage failure holds the message and stores it later (the router's spool):
        # that one is kept, and must not be sent a second time. Before session 39 this
        # asked whether the failure was an OSError: SQLite's own "database or disk is
        # full" (a command's claim in state.db) was held too, but told "not sent", and
        # the owner's second send (a new ref) ran the command twice.
        return refuse(str(exc), kept=isinstance(exc, HeldForRetry))
    return accepted(hub, client, ref)


async def pending_answer(hub: WsHub, client: Client, command: tuple[str, str]) -> None:
    """Answer ``/model`` or ``/rename`` typed in a chat with no conversation yet: they
    set the model or the title of the conversation its first message starts, as the
    selector does. Run as commands, each created a conversation only to record itself
    in and left it empty in the list (a bare one or an unknown name changed nothing)."""
    name, args = command
    extra: dict[str, str] = {}
    if name == "model":
        config = hub.channel.config
        current = client.pending_model or config.models.default
        missing = missing_model_ids(hub.services)
        offline = hub.services.brain.name == "offline"
        answer, alias = model_answer(config, current, args, NEXT_CONVERSATION, missing, offline)
        if alias is not None and alias != current:
            refusal = await model_refusal(config, hub.services.brain, alias, current)
            if refusal is not None:
                answer, alias = refusal, None
        if alias is not None:
            client.pending_model = extra["pendingModel"] = alias
    else:
        answer, title = rename_answer(args, NEXT_CONVERSATION)
        if title is not None:
            # Given to the conversation as a manual title when it is created, so that
            # automatic naming never replaces it.
            client.pending_title = extra["pendingTitle"] = title
    hub.send(client, {"type": "notice", "kind": "command", "text": answer, "actions": []} | extra)


def accepted(hub: WsHub, client: Client, ref: str | None) -> bool:
    """Tell the tab its message ``ref`` is stored (always true: the caller returns it)."""
    if ref is not None:
        hub.send(client, {"type": "accepted", "ref": ref})
    return True
