"""Albums: several photos or videos sent together arrive as one message each.

Telegram delivers an album as separate messages sharing a ``media_group_id`` (the caption,
if any, on the first). Each was answered on its own: three replies to one album of three
photos. Every item is recorded, but only the first is answered; the others are marked
not addressed, like group chatter, and go to the brain as context of what follows.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from bot.events import InboundMessage

REMEMBERED = 256  # albums are delivered together: only recent ones matter


class Albums:
    """Remembers the albums whose first item was seen (bounded, in memory)."""

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def apply(self, inbound: InboundMessage) -> InboundMessage:
        """``inbound`` itself for an album's first item (or no album), else not addressed."""
        group = inbound.metadata.get("media_group")
        if not group or inbound.metadata.get("edited"):
            return inbound
        key = (inbound.chat_id, str(group))
        if key in self._seen:
            return replace(inbound, addressed=False)
        self._seen[key] = None
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        return inbound
