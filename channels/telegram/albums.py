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

The albums seen are kept as a channel cursor (:meth:`Albums.dump`, :meth:`Albums.load`):
a restart between two items of an album (its items come in one batch, usually, but a
stop can fall between two) forgot that its first caption mentioned the bot, and in a
group the rest of it was recorded as not addressed, left out of the album's one reply.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import replace

from bot.events import InboundMessage

log = logging.getLogger("my_agent.telegram")

REMEMBERED = 256  # albums are delivered together: only recent ones matter
SAVED = 32  # of which kept across a restart: a stop falls in one album at most


class Albums:
    """Remembers the albums whose first item was seen, and whether it was addressed
    (bounded, in memory)."""

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self.changed = False  # since the last :meth:`dump`

    def load(self, stored: str | None) -> None:
        """Take back the albums :meth:`dump` saved (JSON), if readable."""
        try:
            for chat, group, addressed in json.loads(stored) if stored else ():
                self._seen[(str(chat), str(group))] = bool(addressed)
        except (ValueError, TypeError):
            log.warning("the saved Telegram albums are unreadable; ignoring them")

    def dump(self) -> str:
        """The most recent albums as JSON, for :meth:`load` after a restart."""
        self.changed = False
        recent = list(self._seen.items())[-SAVED:]
        return json.dumps([[chat, group, addressed] for (chat, group), addressed in recent])

    def apply(self, inbound: InboundMessage) -> InboundMessage:
        """``inbound`` itself for an album's first item (or no album), else marked as a
        later part, addressed when the album is."""
        group = inbound.metadata.get("media_group")
        if not group or inbound.metadata.get("edited"):
            return inbound
        key = (inbound.chat_id, str(group))
        if key in self._seen:
            addressed = self._seen[key] or inbound.addressed
            self.changed |= addressed != self._seen[key]
            self._seen[key] = addressed
            metadata = {**inbound.metadata, "album_part": True}
            return replace(inbound, addressed=addressed, metadata=metadata)
        self._seen[key] = inbound.addressed
        self.changed = True
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        return inbound
