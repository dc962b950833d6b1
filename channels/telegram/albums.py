"""Albums: several photos or videos sent together arrive as one message each.

Telegram delivers an album as separate messages sharing a ``media_group_id`` (a caption
may be on any of them). Each was answered on its own: three replies to one album of
three photos. Now every item is marked with its album (``media_group``), and the core
gives the album one reply, once it is complete, with every caption in its context
(:meth:`bot.replies.ReplyEngine.submit`, ``album``).

Here the later items take the album's addressing: in a group, the mention is usually in
the first caption only, and the other photos are part of the same question. They are
marked ``album_part`` (a third party's album is handled once, as one message, by
:mod:`bot.strangers`, which collects its photos by ``media_group``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from bot.events import InboundMessage

REMEMBERED = 256  # albums are delivered together: only recent ones matter


class Albums:
    """Remembers the albums whose first item was seen, and whether it was addressed
    (bounded, in memory)."""

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], bool] = OrderedDict()

    def apply(self, inbound: InboundMessage) -> InboundMessage:
        """``inbound`` itself for an album's first item (or no album), else marked as a
        later part, addressed when the album is."""
        group = inbound.metadata.get("media_group")
        if not group or inbound.metadata.get("edited"):
            return inbound
        key = (inbound.chat_id, str(group))
        if key in self._seen:
            addressed = self._seen[key] or inbound.addressed
            self._seen[key] = addressed
            metadata = {**inbound.metadata, "album_part": True}
            return replace(inbound, addressed=addressed, metadata=metadata)
        self._seen[key] = inbound.addressed
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        return inbound
