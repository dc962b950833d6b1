"""One ``getUpdates`` long poll, cut short by a stop, and the updates it brought.

An update aiogram cannot parse does not fail its whole batch: the batch is salvaged
update by update. A message of which a part has a shape this aiogram does not know (a
poll Telegram changed, a field of a newer Bot API) comes without that part, the part's
name noted (:func:`unread_parts`), so that it is recorded as received and labelled
(before session 21 it was skipped: the owner's message lost). What cannot be read even
so comes back as ``(id, None)`` so the adapter skips it instead of polling it again
forever.
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
UNREAD_KEY = "my_agent_unread_parts"  # on a message kept without parts it had
# What a message cannot be kept without: with one of these unreadable, it is skipped.
ESSENTIAL = frozenset({"message_id", "date", "chat"})


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
            kept = without_unread(item, err, bot)
            if kept is None:
                log.error("update %s cannot be parsed (%s); skipping it", update_id, err)
            else:
                log.error("update %s kept without its %s, which cannot be parsed (%s)",
                          update_id, ", ".join(unread_parts(kept)), err)  # fmt: skip
            batch.append((update_id, kept))
    return batch


def without_unread(item: dict[str, object], err: ValidationError, bot: Bot) -> Update | None:
    """The message of ``item`` without the parts ``err`` says cannot be parsed (their
    names kept under :data:`UNREAD_KEY`), or None when that is no message either."""
    kind = next((k for k in ("message", "edited_message") if isinstance(item.get(k), dict)), None)
    if kind is None:
        return None
    bad = set()
    for error in err.errors():
        loc = error.get("loc", ())
        if len(loc) < 2 or loc[0] != kind or not isinstance(loc[1], str):
            return None  # not the message's own parts: nothing to keep
        bad.add(loc[1])
    if not bad or bad & ESSENTIAL:
        return None
    raw = item[kind]
    assert isinstance(raw, dict)
    slim = {k: v for k, v in raw.items() if k not in bad}
    slim[UNREAD_KEY] = sorted(bad)
    try:
        return Update.model_validate({"update_id": item["update_id"], kind: slim},
                                     context={"bot": bot})  # fmt: skip
    except ValidationError:
        return None


def unread_parts(update: Update) -> list[str]:
    """The parts of an update's message :func:`without_unread` left out, if any."""
    message = update.message or update.edited_message
    extra = message.model_extra if message is not None else None
    parts = (extra or {}).get(UNREAD_KEY)
    return [str(p) for p in parts] if isinstance(parts, list) else []
