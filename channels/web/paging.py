"""More of the conversation in view, a page at a time: older pages (``load_more``,
scrolling up) and newer ones (``load_newer``, scrolling down a conversation opened
around an old turn, a search result's). Each page names where the next one begins in
the transcript (``olderThan``, ``newerThan``: byte offsets), so paging either way shows
every item once, in the transcript's order. The rest of the protocol is
:mod:`channels.web.ws`; the pages themselves, :mod:`channels.web.pages`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels.web.tabs import Client

if TYPE_CHECKING:
    from channels.web.ws import WsHub

PAGE_SIZE = 50


LAST_POSITION = 2**63 - 1
"""SQLite's largest integer: a position the dashboard sends past it is read as this one
(it finds nothing either way; past it SQLite raised OverflowError, a 500)."""


def _offset(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return value


async def load_older(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """``history``: the page before the one the tab shows first."""
    cid, before = data.get("conversationId"), data.get("beforeTurn")
    # The page's own cursor, or a turn number (the older protocol): the items before
    # a question missed what lay between it and the late answers a page began with.
    older = _offset(data, "olderThan")
    if not isinstance(cid, str) or (older is None and not isinstance(before, int)):
        return
    page = await hub.channel.read_page(
        cid, PAGE_SIZE, before=before if older is None else None, older_than=older
    )
    hub.send(
        client,
        {
            "type": "history",
            "conversationId": cid,
            "turns": page.items,
            "hasMore": page.has_more,
            "olderThan": page.start,
        },
    )


async def load_newer(hub: WsHub, client: Client, data: dict[str, Any]) -> None:
    """``newer``: the page after the one the tab shows last (``newerThan``, its end).

    The tab sets aside new turns and streamed words while newer pages exist (they would
    seem to follow its last page directly). The last page may have been read before a
    turn written meanwhile, so what was broadcast during the read is sent again after
    it (the tab skips a turn it shows already), and a reply being written comes whole
    so far, as to a tab that opens the conversation."""
    cid, newer = data.get("conversationId"), _offset(data, "newerThan")
    if not isinstance(cid, str) or newer is None:
        return
    client.loading = (cid, [])
    try:
        page = await hub.channel.read_page(cid, PAGE_SIZE, newer_than=newer)
    finally:
        missed = client.loading[1] if client.loading else []
        client.loading = None
    hub.send(
        client,
        {
            "type": "newer",
            "conversationId": cid,
            "turns": page.items,
            "hasNewer": page.has_newer,
            "newerThan": page.end,
        },
    )
    if page.has_newer or client.conversation_id != cid:
        return
    hub.feed.catch_up_stream(client, cid)
    for payload in missed:
        hub.send(client, payload)
