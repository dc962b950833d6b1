"""One ``getUpdates`` long poll, cut short by a stop, and the updates it brought.

An update aiogram cannot parse does not fail its whole batch: the batch is salvaged
update by update, and the unparseable one comes back as ``(id, None)`` so the adapter
skips it instead of polling it again forever.
"""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import GetUpdates
from aiogram.types import Update
from pydantic import ValidationError

log = logging.getLogger("my_agent.telegram")

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]

Batch = list[tuple[int, Update | None]]


async def poll_updates(
    bot: Bot, *, offset: int, timeout: int, session_timeout: float, stopping: asyncio.Event
) -> Batch | None:
    """One long poll from ``offset``; None when interrupted by ``stopping``. Each update
    comes with its id; an update aiogram cannot even parse comes as (id, None) so it is
    skipped, not retried forever."""
    request = GetUpdates(offset=offset or None, timeout=timeout, allowed_updates=ALLOWED_UPDATES)
    poll = asyncio.ensure_future(bot(request, request_timeout=int(session_timeout + timeout)))
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not poll.done():
            poll.cancel()
            await asyncio.gather(poll, return_exceptions=True)
    if poll.cancelled():
        return None
    try:
        return [(u.update_id, u) for u in poll.result()]
    except ClientDecodeError as exc:
        return salvage(exc, bot)


def salvage(exc: ClientDecodeError, bot: Bot) -> Batch:
    """The updates of a batch aiogram refused as a whole, parsed one by one."""
    raw = exc.data.get("result") if isinstance(exc.data, dict) else None
    if not isinstance(raw, list):
        raise exc
    batch: Batch = []
    for item in raw:
        update_id = item.get("update_id") if isinstance(item, dict) else None
        if not isinstance(update_id, int):
            continue
        try:
            batch.append((update_id, Update.model_validate(item, context={"bot": bot})))
        except ValidationError as err:
            log.error("update %s cannot be parsed (%s); skipping it", update_id, err)
            batch.append((update_id, None))
    return batch
