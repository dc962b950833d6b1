"""What a tab changes about a conversation: its title (``rename_conversation``) and its
model (``set_model``), for the conversation in view or, in a chat with no conversation
yet, for the one its first message starts. The rest of the protocol is
:mod:`channels.web.ws`; ``/rename`` and ``/model`` typed in the box go through the core
(or :func:`channels.web.sending.pending_answer` in a new chat).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.commands import alias_named
from bot.conversations import ConversationNotFound
from bot.labels import clip_title, plain_title
from bot.model_switch import model_refusal
from channels.web.tabs import Client
from channels.web.views import conversation_updated

if TYPE_CHECKING:
    from channels.web.ws import WsHub


async def rename_conversation(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """Give the named conversation (or the one in view) a manual title."""
    cid = data.get("conversationId") or client.conversation_id
    # (controls count as nothing here too: "\x00" alone was no title, yet not refused)
    title = plain_title(str(data.get("title") or ""))[:200]
    if not cid and title:
        # The title the page shows for a chat with no conversation yet ("/rename"
        # typed there), told again to a server that reconnected.
        client.pending_title = clip_title(title) or None
        return
    if not cid or not title:
        hub.send(client, {"type": "error", "message": "nothing to rename"})
        return
    # The manager emits conversation_renamed; the bus handler broadcasts it.
    try:
        await hub.services.conversations.rename(str(cid), title)
    except ConversationNotFound:  # deleted meanwhile, or an id from a stale tab
        hub.send(client, {"type": "error", "message": "no such conversation"})


async def set_model(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """Set the model alias of the conversation in view (every tab is told), or of the
    one the first message of an empty chat starts."""
    named = str(data.get("model") or "")
    # read as /model reads it (an alias in any case, or the model id it names): "OPUS"
    # or "claude-haiku-4-5" switched when typed, and was refused here
    alias = alias_named(hub.channel.config.models.aliases, named.strip().lower()) or ""
    if not alias:
        hub.send(client, {"type": "error", "message": f"unknown model {named!r}"})
        return
    cid = client.conversation_id
    rec = await hub.services.conversations.get(cid) if cid is not None else None
    config = hub.channel.config
    current = (rec.model if rec is not None else client.pending_model) or config.models.default
    if alias != current:
        # The selector switched without asking the model service what /model asks: a
        # model id it does not know answered every reply of the chat with a notice.
        refusal = await model_refusal(config, hub.services.brain, alias, current)
        if refusal is not None:  # said, and the selector shows the model kept again
            if rec is not None:
                hub.send(client, {"type": "error", "message": refusal})
                hub.send(client, conversation_updated(rec))
            else:  # a new chat: its notice carries the model its conversation will get
                notice = {"type": "notice", "kind": "command", "text": refusal, "actions": []}
                hub.send(client, notice | {"pendingModel": current})
            return
    if cid is None:
        client.pending_model = alias
        return
    await hub.services.conversations.set_model(cid, alias)
    rec = await hub.services.conversations.get(cid)
    if rec is not None:
        hub.tabs.broadcast(conversation_updated(rec))
