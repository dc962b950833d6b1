"""What a third party can make us store: the text kept of one message.

A stranger's 5 MB mail was stored whole (their file and the index), and a flood of them
filled the disk. One message keeps at most ``trust.party_message_max_chars`` characters
(the index 8,000 of those: :data:`bot.parties.INDEX_MESSAGE_CHARS`); an untrusted party
past ``trust.untrusted_messages_per_hour`` messages in the hour (or all untrusted parties
past ``trust.untrusted_messages_per_hour_total``: a new address per message) keeps
:data:`FLOOD_CHARS` of each, as much as its escalation quotes. A cut text ends with a
line saying how many characters were not kept, and why.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.events import InboundMessage, iso, utcnow
from bot.parties import cut_text, party_handle

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.router")

# What a flooding stranger's message keeps: as much as an escalation quotes of it.
FLOOD_CHARS = 500


async def kept(services: Services, msg: InboundMessage, party_key: str) -> InboundMessage:
    """``msg`` with the text a third party's message keeps (the same ``msg`` when whole)."""
    limit, why = services.config.trust.party_message_max_chars, "party_message_max_chars"
    if len(msg.text) > FLOOD_CHARS and await _flooding(services, msg.channel, party_key):
        limit, why = FLOOD_CHARS, "untrusted_messages_per_hour"
    if len(msg.text) <= limit:
        return msg
    log.warning(
        "%s message of %d characters from a third party cut (%s)", msg.channel, len(msg.text), why
    )
    return replace(msg, text=cut_text(msg.text, limit, f"not kept ({why})"))


async def _flooding(services: Services, channel: str, party_key: str) -> bool:
    """Whether an untrusted party (or all of them) sent more than the hour's budget."""
    ext, trust = services.external, services.config.trust
    party = await ext.get(party_handle(channel, party_key))
    tier = party.tier if party else ext.configured_tier(channel, party_key) or trust.default_tier
    if tier != "untrusted":
        return False
    hour = iso(utcnow() - timedelta(hours=1))
    if party and await ext.untrusted_messages_since(hour, party.id) >= (
        trust.untrusted_messages_per_hour
    ):
        return True
    return await ext.untrusted_messages_since(hour) >= trust.untrusted_messages_per_hour_total
