"""A small in-process event bus: the store announces, the lifecycle and dashboard listen.

Events and their keyword payloads:

- ``turn_appended``: conversation_id, turn (the transcript line dict), conversation (record)
- ``conversation_created``: conversation (ConversationRecord), reason ("new", "first_contact", ...)
- ``conversation_updated``: conversation (ConversationRecord)
- ``conversation_renamed``: conversation_id, title, manual (bool)
- ``conversation_switched``: previous_id (str | None), current_id (str | None), channel
- ``event_appended``: conversation_id, event (the transcript line dict: compression, ...)
- ``external_updated``: party (PartyRecord), message (dict | None)
- ``tier_changed``: party (PartyRecord, its new tier): the owner's ``/trust``, ``/block``
  or the dashboard's tier set it (not the config, which applies at their next message)
- ``escalation_created``: party (PartyRecord), escalation_id, text
- ``reply_waiting``: conversation_id, text (the outage notice), channel (the notice's): the
  reply owed there waits for the model (once per reply and process; the state itself is
  ``ReplyGeneration.waiting``, until the model answers again or the reply ends)

Handlers are async callables taking keyword arguments. A failing handler is logged and
never affects the emitter or other handlers.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("my_agent.hooks")

Handler = Callable[..., Awaitable[None]]


class EventBus:
    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = defaultdict(list)

    def subscribe(self, event: str, handler: Handler) -> Callable[[], None]:
        """Register ``handler`` for ``event``; returns a function that unsubscribes it."""
        self._handlers[event].append(handler)

        def _unsubscribe() -> None:
            if handler in self._handlers[event]:
                self._handlers[event].remove(handler)

        return _unsubscribe

    async def emit(self, name: str, /, **payload: Any) -> None:
        for handler in list(self._handlers.get(name, ())):
            try:
                await handler(**payload)
            except Exception:
                log.exception("handler %r for %s failed", handler, name)
