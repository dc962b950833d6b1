"""What a tab changes about a conversation: its title (``rename_conversation``) and its
model (``set_model``), for the conversation in view or, in a chat with no conversation
yet, for the one its first message starts. The rest of the protocol is
:mod:`channels.web.ws`; ``/rename`` and ``/model`` typed in the box go through the core
(or :func:`channels.web.sending.pending_answer` in a new chat).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.conversations import ConversationNotFound
from bot.labels import clip_title
from channels.web.tabs import Client
from channels.web.views import conversation_meta

if TYPE_CHECKING:
    from channels.web.ws import WsHub


async def rename_conversation(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """Give the named conversation (or the one in view) a manual title."""
    cid = data.get("conversationId") or client.conversation_id
    title = str(data.get("title") or "").strip()[:200]
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
    alias = str(data.get("model") or "")
    if alias not in hub.channel.config.models.aliases:
        hub.send(client, {"type": "error", "message": f"unknown model {alias!r}"})
        return
    if client.conversation_id is None:
        client.pending_model = alias
        return
    await hub.services.conversations.set_model(client.conversation_id, alias)
    rec = await hub.services.conversations.get(client.conversation_id)
    if rec is not None:
        hub.tabs.broadcast(
            {
                "type": "conversation_updated",
                "conversationId": rec.id,
                "conversation": conversation_meta(rec),
            }
        )
