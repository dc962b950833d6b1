"""The tier that applies to a party now, whatever their record says.

A party's record keeps the tier it was given and by whom (``tier_source``: ``owner``
for ``/trust`` and ``/block``, ``config`` for ``trust.contacts``, ``default`` for
``trust.default_tier``), as of their last message. The config may have changed since (a
SIGHUP, a restart): the owner's choice stands; otherwise the config beats the default,
and a tier the config gave goes when it no longer names them (the default tier again).
Their next message writes that change into their file (:mod:`bot.party_lines`); until
then everything that asks what a party is now reads it here: a restart answering what
a stop cut (:mod:`bot.party_resume`) and the dashboard's list of parties
(channels/web/api.py), which showed "contact" for one taken off ``trust.contacts``
until their next message before session 30.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bot.config import AppConfig
from bot.parties import configured_tier


def tier_change(
    tier: str, source: str, configured: str | None, default_tier: str
) -> tuple[str, str] | None:
    """The (tier, source) a party whose record says (``tier``, ``source``) has now
    that the config gives them ``configured`` (None: it does not name them), or None
    when their record stands."""
    if source == "owner":
        return None  # the owner's /trust or /block: the config does not overrule it
    if configured:
        return (configured, "config") if configured != tier else None
    if source == "config":
        # Taken off trust.contacts: kept, a contact taken off the list was answered by
        # the model for good, a party unblocked there stayed blocked.
        return default_tier, "default"
    return None


def tier_now(
    config: AppConfig,
    channel: str,
    party_key: str,
    tier: str,
    source: str,
    handles: Sequence[str] = (),
) -> tuple[str, str]:
    """(tier, source) that applies now to the party ``party_key`` on ``channel``
    whose record says (``tier``, ``source``); ``handles``: the names their last
    message carried (a Telegram @username), which ``trust.contacts`` may name them by."""
    configured = configured_tier(config, channel, party_key, handles)
    changed = tier_change(tier, source, configured, config.trust.default_tier)
    return changed or (tier, source)


def handles_of(meta: Any) -> list[str]:
    """The handles a party's ``meta`` column keeps (JSON, as SQLite's
    ``json_extract(meta, '$.handles')`` gives them, or a list): none when unreadable."""
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return []
    return [h for h in meta if isinstance(h, str)] if isinstance(meta, list) else []
