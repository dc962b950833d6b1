"""JSON shapes the dashboard receives: ConversationMeta (seed 000), turns and events.

Only these helpers decide what leaves the server, so the browser never sees routing
internals (identity keys, byte offsets) and every shape is built in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.graphemes import shorten
from bot.labels import channel_label

# Transcript events shown in the chat as folded system notes.
NOTE_EVENTS = frozenset(
    {
        "compression",
        "abbreviation",
        "title_assigned",
        "meta_update",
        "model_changed",
        "unpinned",
        "pinned",
        "error",
        "escalation",
    }
)


# Characters of a conversation's label (a mail's sender and subject) the dashboard shows.
LABEL_SHOWN = 120


def conversation_meta(record: Any, titles: Mapping[str, str] | None = None) -> dict[str, Any]:
    """ConversationMeta for a record, plus ``readOnly`` and ``label`` for the sidebar
    (at most :data:`LABEL_SHOWN` characters, ending "…" when cut, with ``labelFull`` the
    whole label then).

    A conversation pinned to a channel identity is read-only on the web (the channel owns
    it); once unpinned (``/new`` on that channel) the dashboard may continue it.
    ``titles``: titles derived at read time (:mod:`channels.web.titles`) by id.
    """
    if hasattr(record, "to_meta"):
        meta: dict[str, Any] = dict(record.to_meta())
    else:  # a plain mapping (tests, older records)
        meta = dict(record)
    if titles and meta.get("id") in titles:
        meta["title"] = titles[meta["id"]]
    channel = str(meta.get("channel") or "web")
    channel_meta = meta.get("channelMeta") or {}
    meta.pop("participants", None)
    meta["channelMeta"] = {
        k: v
        for k, v in channel_meta.items()
        if k
        in (
            "subject",
            "contact",
            "sender_name",
            "senderName",
            "group_title",
            "groupTitle",
            "username",
            "display_name",
        )
    }
    meta["readOnly"] = channel != "web" and bool(meta.get("pinned"))
    label = channel_label(channel, channel_meta, list(getattr(record, "participants", []) or []))
    # The label of a mail is its sender and subject as the mail stored them: subjects we
    # write are cut at 200 characters (session 41), an incoming one is not, and before
    # session 42 the dashboard showed one of kilobytes whole in its header, sidebar and
    # search results. Shown cut; the whole label goes along for a title attribute.
    meta["label"] = shorten(label, LABEL_SHOWN)
    if meta["label"] != label:
        meta["labelFull"] = label
    return meta


def conversation_updated(record: Any) -> dict[str, Any]:
    """The message that tells a tab a conversation's title, model and counts."""
    meta = conversation_meta(record)
    return {"type": "conversation_updated", "conversationId": meta["id"], "conversation": meta}


def turn_view(line: Mapping[str, Any]) -> dict[str, Any]:
    """A transcript ``turn`` line as the chat renders it."""
    out: dict[str, Any] = {
        "type": "turn",
        "role": line.get("role"),
        "content": line.get("content", ""),
        "timestamp": line.get("timestamp"),
        "turnNumber": line.get("turnNumber"),
    }
    for key in ("channel", "sender", "senderName", "model", "cost"):
        if line.get(key) is not None:
            out[key] = line[key]
    if line.get("error") is True:  # the apology written when the brain failed
        out["error"] = True
    return out


def event_view(line: Mapping[str, Any]) -> dict[str, Any] | None:
    """A transcript ``event`` line as a folded system note, or None if not shown."""
    event = line.get("event")
    if event not in NOTE_EVENTS:
        return None
    text = ""
    for key in ("summary", "text", "title", "message", "name", "model"):
        value = line.get(key)
        if isinstance(value, str) and value:
            text = value
            break
    out: dict[str, Any] = {
        "type": "event",
        "event": event,
        "text": text,
        "timestamp": line.get("timestamp"),
    }
    for key in ("compressedThrough", "throughTurn", "topics", "title", "model", "pinned"):
        if line.get(key) is not None:
            out[key] = line[key]
    return out


def line_views(lines: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turns and shown events of a transcript, in transcript order."""
    out: list[dict[str, Any]] = []
    for line in lines:
        if line.get("type") == "turn":
            out.append(turn_view(line))
        elif line.get("type") == "event":
            view = event_view(line)
            if view is not None:
                out.append(view)
    return out


def page_of(
    items: list[dict[str, Any]], *, limit: int, before: int | None = None, around: int | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """A window of ``items`` (turns and events) and whether older items exist.

    ``before``: items strictly before that turn number (paging up). ``around``: a window
    that contains that turn (opening a search result). Otherwise the last ``limit``.
    The chat reads its pages with :func:`channels.web.pages.read_page`, which gives these
    same windows without reading the whole transcript; this is their definition, over a
    list in memory, and the tests hold the two to each other.
    """
    positions = [i for i, it in enumerate(items) if it["type"] == "turn"]
    end = len(items)
    if before is not None:
        end = next((i for i in positions if (items[i]["turnNumber"] or 0) >= before), len(items))
    elif around is not None:
        hit = next((i for i in positions if (items[i]["turnNumber"] or 0) >= around), None)
        if hit is not None:
            end = min(len(items), hit + max(limit // 2, 1))
            # End with a whole turn: a question without its answer, which lay just past
            # the page, read as unanswered.
            last = next((i for i in reversed(positions) if i < end), None)
            while (
                last is not None
                and end < len(items)
                and items[end]["type"] == "turn"
                and items[end]["turnNumber"] == items[last]["turnNumber"]
            ):
                end += 1
    start = max(0, end - limit)
    first = next((i for i in positions if start <= i < end), None)
    if start > 0 and first is not None:
        # Begin where paging on from here ends ("before" the page's first turn number):
        # a question and its answer share a number, so a page that began with answer N
        # left question N out of every page; notes before the first turn come next page.
        start = first
        number = items[first]["turnNumber"]
        for i in reversed([i for i in positions if i < first]):
            if items[i]["turnNumber"] != number:
                break
            start = i
    return items[start:end], start > 0
