"""Owner identities per channel (SPEC.md "Routing and trust"), normalised before comparison,
and the senders who are nobody the config can name (:func:`anonymous_sender`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bot.config import AppConfig
from bot.parties import normalise_identity

# The metadata key a channel sets on a message whose sender it cannot tell apart from
# others: a Telegram group's anonymous admin writes as the group itself (``from`` is
# GroupAnonymousBot, ``sender_chat`` the group), so every admin who stays anonymous
# there has one sender id, the group's.
ANONYMOUS_ADMIN = "anonymous_admin"
# How such a sender is named, in the transcript and to the model.
ANONYMOUS_ADMIN_NAME = "anonymous admin"


def anonymous_sender(metadata: Mapping[str, Any]) -> bool:
    """Whether a message (its ``metadata``) comes from a sender the channel cannot tell
    apart from others (:data:`ANONYMOUS_ADMIN`): never the owner nor a known contact,
    whatever id it carries, since any of the group's admins may have written it, the
    owner among them or not."""
    return metadata.get(ANONYMOUS_ADMIN) is True


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
