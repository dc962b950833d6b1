"""What the restricted brain reads when it answers a known party: their exchange and
what they said, each message written long before it came labelled so.

A contact's message may come hours after it was written: Telegram keeps a bot's updates
for a day and delivers them once the daemon is back; a mail's ``Date`` may be long
before it reached the mailbox. Their file keeps when it was written (``sentAt``,
:func:`bot.party_lines.inbound_lines`) beside when it came (``timestamp``), and so does
the index (:mod:`bot.schema_party_messages`), from which their exchange is read
(:meth:`bot.party_reads.PartyReads.history`). A message of theirs written more than
:data:`bot.brain.late_turns.LATE_AFTER` before it came is shown after the label the
owner's late turns get (:func:`bot.brain.late_turns.late_note`), in UTC: the restricted
prompt gives the time in UTC on purpose, as the owner's time zone says where they live.
Before session 42 it was not: "can you call me in ten minutes?", written at dawn and
delivered at noon, was answered as if just asked. A message of a file written before
(no ``sentAt``) is shown as it is.

Built from the index alone (no clock): every answer shows the same label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bot.brain.base import BrainRequest, HistoryTurn
from bot.brain.late_turns import RESTRICTED_ZONE, late_note, with_late_note
from bot.events import InboundMessage
from bot.parties import PartyRecord
from bot.party_limits import for_model

if TYPE_CHECKING:
    from bot.services import Services


def labelled(text: str, written: object, arrived: object) -> str:
    """``text`` after the label saying when it was written (``written``, its
    ``sentAt``), if that was long before it ``arrived``; else as it is."""
    return with_late_note(late_note(written, arrived, RESTRICTED_ZONE), text)


def history_turn(row: Mapping[str, Any]) -> HistoryTurn:
    """A row of the party's exchange (:meth:`~bot.party_reads.PartyReads.history`) as the
    model reads it: theirs labelled when it came late."""
    if row["direction"] != "in":
        return HistoryTurn("assistant", row["content"])
    return HistoryTurn("user", labelled(row["content"], row.get("sentAt"), row.get("timestamp")))


async def answer_request(
    services: Services, party: PartyRecord, said: list[InboundMessage]
) -> BrainRequest:
    """The restricted brain's request answering what ``party`` ``said`` (their messages
    answered together, the last one last): their exchange as of its arrival, without
    those messages, then their words, each labelled when it came late."""
    msg = said[-1]
    refs = [m.message_id for m in said]
    history = [
        row
        for row in await services.external.history(party, through=msg.message_id)
        if not (row["direction"] == "in" and row["ref"] in refs)
    ]
    came = await services.external.arrivals(party.id, refs)
    texts = []
    for m in said:
        arrived, written = came.get(m.message_id, (None, None))
        texts.append(labelled(for_model(services, m.text), written, arrived))
    return BrainRequest(
        profile="restricted",
        channel=msg.channel,
        text="\n".join(texts),
        model_alias=party.model or services.config.models.default,
        party_name=msg.sender_name or party.party_key,
        scope=services.config.trust.known_scope,
        readers=tuple(str(r) for r in msg.metadata.get("readers") or ()),
        history=tuple(history_turn(row) for row in history),
    )
