"""What the core tells the open dashboard tabs: streamed tokens, replies and command
answers, new turns and events, created, updated and renamed conversations, changes to
third parties. Subscribed to the event bus (:meth:`Feed.subscribe`), and called by the
channel for what it is asked to send (:meth:`Feed.on_outbound`, :meth:`Feed.on_stream`).

It also keeps the text streamed so far of each reply being written, so a tab that opens
or reconnects mid-reply is sent its beginning, and asks the core for the notice of a reply
that waits for the model (an outage), which no transcript holds (:meth:`Feed.catch_up`).
Owner alerts (:meth:`bot.services.Services.alert_owner`) go to every tab, and the last
day's to each tab that connects later (:meth:`Feed.send_alerts`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bot.events import OutboundMessage, StreamEvent
from bot.tasks import spawn
from channels.web.pages import shown_turn
from channels.web.tabs import Client, Tabs
from channels.web.views import conversation_meta, conversation_updated, event_view

# Shows a conversation in a tab: how a tab follows "/new" typed in it.
Follow = Callable[[Client, str], Coroutine[Any, Any, None]]
# The outage notice of the reply owed in a conversation while it waits for the model
# (bot.reply_generation.ReplyGeneration.waiting), else None.
Waiting = Callable[[str], str | None]


def waiting_frame(conversation_id: str, text: str) -> dict[str, Any]:
    """A ``notice`` frame: why the reply owed in the conversation waits."""
    return {
        "type": "notice",
        "kind": "notice",
        "text": text,
        "conversationId": conversation_id,
        "actions": [],
    }


# Owner alerts (a disk full, sends given up) kept for tabs opened later: how many, and
# for how long. In memory: they are about this run of the daemon.
ALERTS_KEPT = 20
ALERT_SECONDS = 24 * 3600


def alert_frame(text: str) -> dict[str, Any]:
    """A ``notice`` frame for an owner alert (:meth:`bot.services.Services.alert_owner`)."""
    return {"type": "notice", "kind": "alert", "text": text, "actions": []}


def stream_frame(conversation_id: str, turn: int, delta: str, done: bool) -> dict[str, Any]:
    """A ``stream`` frame: one piece of a reply being written."""
    return {
        "type": "stream",
        "conversationId": conversation_id,
        "turnNumber": turn,
        "delta": delta,
        "done": done,
    }


class Feed:
    """Turns the core's announcements into frames for :class:`~channels.web.tabs.Tabs`."""

    def __init__(self, tabs: Tabs, follow: Follow, waiting: Waiting) -> None:
        self.tabs = tabs
        self.follow = follow
        # The core's state rather than the notices this channel was sent, which only
        # cover the dashboard's own conversations and not past a restart (its notice
        # may be the one sent before it, or one still unsent): a tab opened or
        # reloaded afterwards showed the owner's message unanswered, with no reason.
        self.waiting = waiting
        self.alerts: deque[tuple[float, str]] = deque(maxlen=ALERTS_KEPT)
        # conversation id -> (turn number, text streamed so far) of a reply being written,
        # so a tab that opens or reconnects mid-reply gets its beginning too
        self.streaming: dict[str, tuple[int, list[str]]] = {}

    def subscribe(self, bus: Any) -> list[Callable[[], None]]:
        """Follow the event bus; returns the unsubscribe callables."""

        async def turn_appended(
            conversation_id: str, turn: dict[str, Any], conversation: Any = None, **_: Any
        ) -> None:
            await self.on_turn(conversation_id, turn, conversation)

        async def event_appended(conversation_id: str, event: dict[str, Any], **_: Any) -> None:
            await self.on_event(conversation_id, event)

        async def created(conversation: Any, **_: Any) -> None:
            await self.on_conversation(conversation, created=True)

        async def updated(conversation: Any, **_: Any) -> None:
            await self.on_conversation(conversation, created=False)

        async def renamed(conversation_id: str, title: str, **_: Any) -> None:
            await self.on_renamed(conversation_id, title)

        async def external(**_: Any) -> None:
            await self.on_external("party")

        async def escalation(**_: Any) -> None:
            await self.on_external("escalation")

        async def reply_waiting(conversation_id: str, text: str, **_: Any) -> None:
            self.on_waiting(conversation_id, text)

        async def alert(text: str, **_: Any) -> None:
            self.on_alert(text)

        handlers: tuple[tuple[str, Callable[..., Awaitable[None]]], ...] = (
            ("turn_appended", turn_appended),
            ("event_appended", event_appended),
            ("conversation_created", created),
            ("conversation_updated", updated),
            ("conversation_renamed", renamed),
            ("external_updated", external),
            ("escalation_created", escalation),
            ("reply_waiting", reply_waiting),
            ("notice", alert),
        )
        return [bus.subscribe(name, handler) for name, handler in handlers]

    def catch_up(self, client: Client, conversation_id: str) -> None:
        """Send ``client``, which has just loaded the conversation, the reply being
        written in it so far (the rest streams to it from here)."""
        notice = self.waiting(conversation_id)
        if notice is not None:
            self.tabs.send(client, waiting_frame(conversation_id, notice))
        self.catch_up_stream(client, conversation_id)

    def catch_up_stream(self, client: Client, conversation_id: str) -> None:
        """Send ``client`` the reply being written in the conversation so far: it has
        just reached the end of a conversation whose streamed words it set aside."""
        if conversation_id in self.streaming:
            turn, pieces = self.streaming[conversation_id]
            self.tabs.send(client, stream_frame(conversation_id, turn, "".join(pieces), False))

    def on_stream(self, event: StreamEvent) -> None:
        cid = event.conversation_id
        if event.done:
            self.streaming.pop(cid, None)
        else:
            turn, pieces = self.streaming.get(cid, (event.turn_number, []))
            if turn != event.turn_number:  # a reply whose "done" never came
                pieces = []
            pieces.append(event.delta)
            self.streaming[cid] = (event.turn_number, pieces)
        self.tabs.broadcast(
            stream_frame(cid, event.turn_number, event.delta, event.done),
            self.tabs.viewing(cid),
        )

    def on_waiting(self, conversation_id: str, text: str) -> None:
        """The reply owed in ``conversation_id`` waits for the model: the tabs viewing it
        are told why, whichever channel the conversation is on (its notice went there)."""
        self.tabs.broadcast(
            waiting_frame(conversation_id, text), self.tabs.viewing(conversation_id)
        )

    def on_alert(self, text: str) -> None:
        """An owner alert: every open tab is told, and tabs opened later
        (:meth:`send_alerts`). With the dashboard as the only channel (the embedded
        default) the alert had no address and only the log saw it."""
        self.alerts.append((time.monotonic(), text))
        self.tabs.broadcast(alert_frame(text))

    def send_alerts(self, client: Client) -> None:
        """Send ``client`` the alerts of the last :data:`ALERT_SECONDS`, oldest first."""
        since = time.monotonic() - ALERT_SECONDS
        for at, text in self.alerts:
            if at >= since:
                self.tabs.send(client, alert_frame(text))

    def on_outbound(self, message: OutboundMessage) -> None:
        if message.metadata.get("waiting"):
            return  # an outage notice: shown from the core's "reply_waiting" (on_waiting)
        if message.metadata.get("alert"):
            return  # an owner alert: shown from the core's "notice" event (on_alert)
        payload = {
            "type": "reply" if message.kind == "reply" else "notice",
            "kind": message.kind,
            "text": message.text,
            "conversationId": message.conversation_id,
            "actions": [list(a) for a in message.actions],
        }
        results = message.metadata.get("results")
        if isinstance(results, list):  # /search: the page links each conversation
            payload["results"] = results
            payload["heading"] = message.metadata.get("heading")
            payload["footer"] = message.metadata.get("footer") or ""  # how many shown
        status = message.metadata.get("statusLines")
        if isinstance(status, list):  # /status: its conversation a link, not an id
            payload["statusLines"] = status
        origin = self.tabs.get(message.chat_id)
        if message.kind in ("command", "notice") and origin is not None:
            # a command's answer is for the tab that asked
            switched = message.metadata.get("switchedTo")
            if isinstance(switched, str):  # "/new" typed in the dashboard: follow it
                spawn(self._follow(origin, switched, payload), name="web-follow-switch")
            else:
                self.tabs.send(origin, payload)
        else:
            self.tabs.broadcast(payload)

    async def _follow(self, origin: Client, conversation_id: str, answer: dict[str, Any]) -> None:
        """Show the tab the conversation "/new" started, then the command's answer: sent
        first, it was wiped by the conversation shown after it, and until session 26
        neither "Started a new conversation" nor "This conversation is new already" was
        ever seen in the dashboard."""
        try:
            await self.follow(origin, conversation_id)
        finally:
            self.tabs.send(origin, answer)

    async def on_turn(
        self, conversation_id: str, turn: dict[str, Any], conversation: Any = None
    ) -> None:
        payload: dict[str, Any] = {
            "type": "conversation_updated",
            "conversationId": conversation_id,
            # cut like a page's (a live 1 MB reply went whole to every tab): Show all
            "turn": shown_turn(turn),
        }
        if conversation is not None:
            payload["conversation"] = conversation_meta(conversation)
        self.tabs.broadcast_update(conversation_id, payload)

    async def on_event(self, conversation_id: str, event: dict[str, Any]) -> None:
        view = event_view(event)
        if view is not None:
            self.tabs.broadcast_update(
                conversation_id,
                {"type": "conversation_updated", "conversationId": conversation_id, "event": view},
            )

    async def on_conversation(self, conversation: Any, created: bool) -> None:
        if created:
            meta = conversation_meta(conversation)
            self.tabs.broadcast({"type": "conversation_created", "conversation": meta})
        else:
            self.tabs.broadcast(conversation_updated(conversation))

    async def on_renamed(self, conversation_id: str, title: str) -> None:
        self.tabs.broadcast(
            {"type": "conversation_renamed", "conversationId": conversation_id, "title": title}
        )

    async def on_external(self, kind: str) -> None:
        self.tabs.broadcast({"type": "external_updated", "kind": kind})
