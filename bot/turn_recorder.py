"""An owner-side message recorded as a user turn, and its reply asked for.

Used by the router's owner and group flows and by a ``/new <first message>`` (bot/
command_flow.py). Also where a message's reply goes (:func:`reply_target`) and what of
the message a turn keeps (:func:`turn_metadata`; a quoted mail only when the conversation
never held it: :func:`unseen_quote`): the stranger flow, the command answers
and the replies resumed after a restart (bot/resume.py) address their answers the same
way, so these live apart from any one flow.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bot.events import InboundMessage, placement
from bot.index import ConversationRecord
from bot.parties import normalise_identity
from bot.replies import ReplyTarget
from bot.resolver import THREADED_CHANNELS, new_subjects

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.conversations")


def recipients(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The original To/Cc of a message (e-mail reply-all needs them after a restart too),
    its ``reply_to`` (where an e-mail asks to be answered), its ``readers`` (who besides
    the sender reads the reply: the channel says so), its ``thread_index`` (the
    channel's name for an e-mail's Outlook thread, which the reply carries) and its
    :func:`placement`."""
    found: dict[str, Any] = {
        k: list(metadata[k])
        for k in ("to", "cc", "reply_to", "readers")
        if isinstance(metadata.get(k), list)
    }
    if isinstance(metadata.get("thread_index"), str):
        found["thread_index"] = metadata["thread_index"]
    return {**found, **placement(metadata)}


def turn_metadata(msg: InboundMessage) -> dict[str, Any]:
    """What a user turn records of the channel message it came from."""
    meta: dict[str, Any] = {"messageId": msg.message_id, "chatId": msg.chat_id}
    if msg.message_ref and msg.message_ref != msg.message_id:
        meta["messageRef"] = msg.message_ref
    if msg.thread_refs:
        meta["threadRefs"] = list(msg.thread_refs)
    if msg.subject:
        meta["subject"] = msg.subject
    if msg.attachments:
        meta["attachments"] = [asdict(a) for a in msg.attachments]
    meta.update(msg.metadata)
    return meta


async def unseen_quote(services: Services, msg: InboundMessage, conv_id: str) -> bool:
    """Whether the history ``msg`` quotes (metadata ``quoted``, e-mail) is of a message
    ``conv_id`` never held: its ``in_reply_to`` is no message of that conversation (none
    given, a mail the assistant never saw, a third party's, which went to their own
    flow). Then the turn keeps it and the model is shown it (bot/brain/others_words.py);
    otherwise it is in the context already (and in ``full_body``): it is not kept twice.
    Before session 39 the model never saw it."""
    quoted = msg.metadata.get("quoted")
    if not isinstance(quoted, str) or not quoted.strip():
        return False
    answered = msg.metadata.get("in_reply_to")
    if not isinstance(answered, str) or not answered:
        return True
    return await services.index.conversation_for_ref(msg.channel, answered) != conv_id


def reply_target(msg: InboundMessage) -> ReplyTarget:
    """Where the answer to ``msg`` goes: its chat, in reply to it, in its thread."""
    refs = tuple(reversed(msg.thread_refs))
    if msg.message_ref:
        refs = (*refs, msg.message_ref)
    return ReplyTarget(
        channel=msg.channel,
        chat_id=msg.chat_id,
        in_reply_to=msg.message_ref or msg.message_id,
        thread_refs=tuple(dict.fromkeys(refs)),
        subject=msg.subject,
        metadata=recipients(msg.metadata),
    )


class TurnRecorder:
    """Appends a message to an owner-side conversation and submits its reply."""

    def __init__(self, services: Services) -> None:
        self.s = services

    async def record_and_reply(
        self,
        msg: InboundMessage,
        rec: ConversationRecord,
        sender: str | None,
        owner: bool | None = None,
    ) -> None:
        """``owner``: in a group, whether the sender is the owner (by id and aliases; the
        display name proves nothing); None elsewhere (the owner's own conversations)."""
        extra: dict[str, Any] = {}
        if not msg.addressed:
            extra["awaitReply"] = False
        if owner is not None:
            extra["fromOwner"] = owner  # read again when a pending reply is resumed
            # the account, not the name: from a member's first message on is what
            # their replies read of the group (bot/brain/restricted_window.py)
            extra["senderId"] = normalise_identity(msg.channel, msg.sender_id)
        metadata = turn_metadata(msg)
        if "quoted" in metadata and not await unseen_quote(self.s, msg, rec.id):
            del metadata["quoted"]
        rec, line = await self.s.conversations.append_turn(
            rec.id,
            "user",
            msg.text,
            channel=msg.channel,
            sender=sender,
            metadata=metadata,
            **extra,
        )
        if (
            msg.channel != "web"
            and rec.channel_meta.get("chatId") != msg.chat_id
            and rec.channel == msg.channel
        ):
            await self.s.conversations.set_channel_meta(rec.id, chatId=msg.chat_id)
        if msg.addressed:
            self.s.replies.submit(
                rec.id,
                line["turnNumber"],
                msg.text,
                reply_target(msg),
                sender=sender,
                owner=True if owner is None else owner,
                album=msg.metadata.get("media_group"),
            )
        if (
            msg.channel in THREADED_CHANNELS
            and rec.channel == msg.channel
            and msg.addressed  # (a bounce's subject is none the thread has had)
            and (subjects := new_subjects(rec, msg)) is not None
        ):
            # The thread's subject changed: a reply without references that keeps the
            # new one still finds it (bot/resolver.py's subject rule), also after a
            # reindex (a meta_update line). After the reply is asked for: a failure
            # here costs that rule, never the answer.
            try:
                await self.s.conversations.set_channel_meta(rec.id, subjects=subjects)
            except Exception:
                log.exception("could not keep the new subject of conversation %s", rec.id)
