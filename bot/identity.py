"""Owner identities per channel (SPEC.md "Routing and trust"), normalised before comparison."""

from __future__ import annotations

from collections.abc import Iterable

from bot.config import AppConfig
from bot.parties import normalise_identity


class OwnerIdentities:
    """Answers "is this sender the owner?" for any channel."""

    def __init__(self, config: AppConfig) -> None:
        self._by_channel: dict[str, list[str]] = {
            channel: [normalise_identity(channel, i) for i in identities]
            for channel, identities in config.owner.identities.items()
        }
        # (channel, @username) -> the numeric id it is bound to (bot/username_bindings.py)
        self._learned: dict[tuple[str, str], str] = {}

    def learn_address(self, channel: str, username: str, user_id: str) -> None:
        """Where the owner configured as ``username`` can be reached: the numeric id the
        username was first seen with (trust on first use)."""
        self._learned[(channel, normalise_identity(channel, username))] = user_id

    def match(self, channel: str, sender_id: str, aliases: Iterable[str] = ()) -> str | None:
        """The canonical owner identity this sender matches (first in config order)."""
        known = self._by_channel.get(channel, [])
        if not known:
            return None
        candidates = {normalise_identity(channel, sender_id)}
        if not (channel == "telegram" and any(not i.startswith("@") for i in known)):
            # A Telegram @username is the owner only while no numeric id is configured:
            # a username is given up when its holder renames, and whoever registers it
            # next would have been taken for the owner, recall tools and all.
            candidates.update(normalise_identity(channel, a) for a in aliases)
        for identity in known:
            if identity in candidates:
                return known[0]  # one pinned conversation per owner per channel
        return None

    def first(self, channel: str) -> str | None:
        known = self._by_channel.get(channel, [])
        return known[0] if known else None

    def address_for(self, channel: str) -> str | None:
        """Where to reach the owner on a channel without a prior message (an address or a
        numeric Telegram id; a bare @username cannot be messaged, the id it is bound to
        can)."""
        learned = None
        for identity in self._by_channel.get(channel, []):
            if channel == "telegram" and identity.startswith("@"):
                learned = learned or self._learned.get((channel, identity))
                continue
            return identity
        return learned
