"""What a third party can make us store: the text kept of one message.

A stranger's 5 MB mail was stored whole (their file and the index), and a flood of them
filled the disk. One message from a party not known to the owner keeps at most
``trust.party_message_max_chars`` characters (the mail itself stays in the mailbox; a
Telegram text is never that long); a known contact's is kept whole (not a mail that
only claims their address), as the owner's are
(nothing a contact sent is lost), and what the model reads of it is cut to the same
bound (:func:`for_model`). The index keeps 8,000 characters of any message
(:data:`bot.parties.INDEX_MESSAGE_CHARS`). An untrusted party
past ``trust.untrusted_messages_per_hour`` messages in the hour (or all untrusted parties
past ``trust.untrusted_messages_per_hour_total``: a new address per message) keeps
:data:`FLOOD_CHARS` of each, as much as its escalation quotes, and so does every message
of a party the owner blocked. A cut text ends with a
line saying how many characters were not kept, and why.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
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
    if len(msg.text) <= FLOOD_CHARS:
        return msg
    tier = await tier_of(services, msg.channel, party_key, msg.sender_aliases)
    if tier == "known" and msg.identity_verified is not False:
        return msg  # (a mail that only claims a known contact's address is a stranger's)
    if tier == "untrusted" and await _flooding(services, party_handle(msg.channel, party_key)):
        limit, why = FLOOD_CHARS, "untrusted_messages_per_hour"
    elif tier == "blocked":
        # Blocked by the owner: nobody reads them in full, and whom the owner blocks is
        # the likeliest to flood (each kept 50,000 characters, without end).
        limit, why = FLOOD_CHARS, "blocked"
    if len(msg.text) <= limit:
        return msg
    log.warning(
        "%s message of %d characters from a third party cut (%s)", msg.channel, len(msg.text), why
    )
    return replace(msg, text=cut_text(msg.text, limit, f"not kept ({why})"))


def for_model(services: Services, text: str) -> str:
    """What the model reads of a known contact's message: at most
    ``trust.party_message_max_chars`` characters (each character is paid for)."""
    limit = services.config.trust.party_message_max_chars
    return cut_text(text, limit, "not shown to the model (party_message_max_chars)")


async def tier_of(
    services: Services, channel: str, party_key: str, aliases: Sequence[str] = ()
) -> str:
    """A party's tier as recorded, else as configured (their first message; ``aliases``:
    their other identities, a Telegram @username, which ``trust.contacts`` may name)."""
    party = await services.external.get(party_handle(channel, party_key))
    if party is not None:
        return party.tier
    configured = services.external.configured_tier(channel, party_key, aliases)
    return configured or services.config.trust.default_tier


async def forged_known(services: Services, msg: InboundMessage, party_key: str) -> bool:
    """Whether ``msg`` only claims to come from a known party: their address, not
    verified as theirs by the receiving server (e-mail)."""
    if msg.identity_verified is not False:
        return False
    return await tier_of(services, msg.channel, party_key, msg.sender_aliases) == "known"


async def _flooding(services: Services, party_id: str) -> bool:
    """Whether an untrusted party (``party_id``: none of theirs counted yet if not
    recorded), or all untrusted parties together, sent more than the hour's budget."""
    ext, trust = services.external, services.config.trust
    hour = iso(utcnow() - timedelta(hours=1))
    if await ext.untrusted_messages_since(hour, party_id) >= trust.untrusted_messages_per_hour:
        return True
    return await ext.untrusted_messages_since(hour) >= trust.untrusted_messages_per_hour_total
