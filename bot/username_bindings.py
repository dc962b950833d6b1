"""Trust on first use of the Telegram @usernames the config names.

``owner.identities.telegram`` and ``trust.contacts.telegram`` may name a person by
@username. A username is not a person: its holder can rename, and whoever registers it
next sent messages that carried it, and was taken for the owner (recall tools, the
owner's context) or for the contact. So the first time a configured @username is seen,
it is bound to that sender's numeric user id, in ``state.db`` (``username_bindings``,
state migration 4: no reindex rebuilds it). Afterwards:

* another numeric id carrying that username does not carry it here: the message is
  routed as if the sender had no such username (a stranger, unless their id is
  configured), and the owner is told once per (username, id), with how to accept them;
* the bound id keeps the username after renaming: its messages are routed as if they
  still carried it.

A store from before the bindings (session 28) binds a name to the account it already
shows with it (:meth:`UsernameBindings._earlier_holder`), not to whoever writes first
after the upgrade, who may be the name's next holder.

Owner usernames are bound only while no numeric owner id is configured on the channel:
with one, the owner is matched by id alone (:mod:`bot.identity`) and a username plays
no part. The router vets every message before matching it (:meth:`vetted`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from bot.events import InboundMessage, iso, utcnow
from bot.owner_notices import notice_due
from bot.parties import normalise_identity

if TYPE_CHECKING:
    from bot.services import Services

log = logging.getLogger("my_agent.identity")

CHANNEL = "telegram"  # the one channel whose names can change hands

TAKEN_NOTICE = (
    "Telegram {username} is bound to user id {bound}, the id it was first seen with. "
    "Now user id {sender} writes as {username}: a username passes to whoever registers "
    "it after its holder renames, so I treat {sender} as a stranger and user id "
    "{bound} stays {whom}. If {sender} really is {whom} now, put the number {sender} in "
    "the config ({key}) and restart me."
)


class UsernameBindings:
    """The numeric id each configured Telegram @username was first seen with."""

    def __init__(self, services: Services) -> None:
        self.s = services
        self._bound: dict[str, str] | None = None  # username -> user id, once loaded
        # one message's look-up and binding at a time: two first messages carrying the
        # same username at once must not both bind it
        self._lock = asyncio.Lock()

    def configured(self) -> dict[str, str]:
        """The configured @usernames that are bound on first use -> whom they name
        ("owner" or "contact")."""
        config = self.s.config
        names: dict[str, str] = {}
        for identity in config.trust.contacts.get(CHANNEL, {}):
            if identity.strip().startswith("@"):
                names[normalise_identity(CHANNEL, identity)] = "contact"
        owner = [i.strip() for i in config.owner.identities.get(CHANNEL, [])]
        if all(i.startswith("@") for i in owner):
            for identity in owner:
                names[normalise_identity(CHANNEL, identity)] = "owner"
        return names

    async def vetted(self, msg: InboundMessage) -> InboundMessage:
        """``msg`` with the @usernames it may carry: a configured one only from the id
        it is bound to (binding it first if nobody had it), plus those bound to its
        sender that it no longer carries (they renamed)."""
        configured = self.configured() if msg.channel == CHANNEL else {}
        if not configured:
            return msg
        sender = normalise_identity(CHANNEL, msg.sender_id)
        kept: list[str] = []
        taken: list[tuple[str, str]] = []  # (username, the id it is bound to)
        async with self._lock:
            bound = await self._bindings()
            for alias in msg.sender_aliases:
                name = normalise_identity(CHANNEL, alias)
                holder = bound.get(name)
                if name in configured and holder is None:
                    holder = await self._earlier_holder(name, configured[name], sender)
                    await self._bind(name, holder)
                if name not in configured or holder == sender:
                    kept.append(alias)
                else:
                    taken.append((name, holder or ""))
            carried = {normalise_identity(CHANNEL, a) for a in kept}
            kept += [
                n for n, h in bound.items() if h == sender and n in configured and n not in carried
            ]
            # every time: a reload of the config makes the owner's identities afresh
            self._teach_owner_addresses()
        for name, holder in taken:
            log.warning(
                "telegram %s is bound to user %s: user %s carrying it is not taken for them",
                name,
                holder,
                sender,
            )
            await self._tell_owner(name, holder, sender, configured[name])
        if tuple(kept) == msg.sender_aliases:
            return msg
        return replace(msg, sender_aliases=tuple(kept))

    async def _bindings(self) -> dict[str, str]:
        if self._bound is None:
            rows = await self.s.state.fetchall(
                "SELECT username, user_id FROM username_bindings WHERE channel = ?", (CHANNEL,)
            )
            self._bound = {str(u): str(i) for u, i in rows}
        return self._bound

    async def _earlier_holder(self, username: str, whom: str, sender: str) -> str:
        """Whom ``username`` is bound to when first seen here: ``sender``, unless what
        was stored before bindings were (session 28) shows another account with it
        first. A store that predates them held the owner's conversation and the
        contacts' records, and whoever wrote first after the upgrade, maybe the name's
        next holder, was bound to it, the owner's context or the contact's tier with
        it: the first use was earlier, and it was theirs."""
        if whom == "owner":
            earlier = await self._earlier_owner(sender)
        else:
            rows = await self.s.external.db.fetchall(
                "SELECT party_key FROM external_parties WHERE channel = ? AND EXISTS "
                "(SELECT 1 FROM json_each(external_parties.meta, '$.handles') WHERE value = ?)"
                " ORDER BY created, id",
                (CHANNEL, username),
            )
            holders = [normalise_identity(CHANNEL, str(r[0])) for r in rows]
            earlier = None if not holders or sender in holders else holders[0]
        if earlier is not None and earlier != sender:
            log.warning(
                "telegram %s first seen here from user %s, but stored before from user %s: "
                "bound to %s",
                username,
                sender,
                earlier,
                earlier,
            )
            return earlier
        return sender

    async def _earlier_owner(self, sender: str) -> str | None:
        """The account the owner's pinned conversation on Telegram was first written
        from, unless ``sender`` wrote there too; None without one. Only while a single
        owner @username is configured: turns record the account, not the name it
        carried, and with two names either account may be either name."""
        owner_names = [n for n, whom in self.configured().items() if whom == "owner"]
        first = self.s.identities.first(CHANNEL)
        if len(owner_names) != 1 or first is None:
            return None
        written = (
            "FROM conversations c JOIN turns t ON t.conversation_id = c.id "
            "WHERE c.identity_key = ? AND t.role = 'user' AND t.sender IS NOT NULL"
        )
        key = f"{CHANNEL}:{first}"
        db = self.s.index.db
        if await db.fetchone(f"SELECT 1 {written} AND t.sender = ? LIMIT 1", (key, sender)):
            return None
        row = await db.fetchone(f"SELECT t.sender {written} ORDER BY t.turn_number LIMIT 1", (key,))
        return normalise_identity(CHANNEL, str(row[0])) if row else None

    async def _bind(self, username: str, user_id: str) -> None:
        await self.s.state.execute(
            "INSERT OR IGNORE INTO username_bindings (channel, username, user_id, bound) "
            "VALUES (?, ?, ?, ?)",
            (CHANNEL, username, user_id, iso(utcnow())),
        )
        assert self._bound is not None
        self._bound[username] = user_id
        log.info("telegram %s bound to user %s (first seen)", username, user_id)

    def _teach_owner_addresses(self) -> None:
        """Tell :class:`~bot.identity.OwnerIdentities` the ids the owner's usernames are
        bound to: a bare @username cannot be messaged, the bound id can (alerts,
        escalations)."""
        owner_names = {n for n, whom in self.configured().items() if whom == "owner"}
        for name, user_id in (self._bound or {}).items():
            if name in owner_names:
                self.s.identities.learn_address(CHANNEL, name, user_id)

    async def _tell_owner(self, username: str, bound: str, sender: str, whom: str) -> None:
        # once per (username, id) ever (math.inf): each of their messages is escalated
        # as a stranger's anyway, under the escalation limits
        if not await notice_due(self.s.state, f"username-taken:{username}:{sender}", math.inf):
            return
        if whom == "owner":
            key = f"owner.identities.{CHANNEL}"
        else:
            tier = self.s.external.configured_tier(CHANNEL, username) or "known"
            key = f'trust.contacts.{CHANNEL}: "{sender}": {tier}'

        who = "you" if whom == "owner" else f"the contact {username}"
        await self.s.alert_owner(
            TAKEN_NOTICE.format(username=username, bound=bound, sender=sender, whom=who, key=key)
        )
