"""Trust on first use of configured Telegram @usernames (bot/username_bindings.py): a
username that changes hands does not carry the owner's or a contact's trust with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.services import open_services
from tests.conftest import RecordingChannel, settle, shutdown_services
from tests.support import ScriptedBrain, inbound
from tests.test_router import Core, _config

OWNER_ONLY_BY_NAME = {"identities": {"telegram": ["@RobinOwner"]}}


async def _core(tmp_path: Path, **overrides: Any) -> Core:
    brain = ScriptedBrain()
    services = await open_services(_config(tmp_path, **overrides), brain=brain)
    return await Core(services, brain).start()


def _notices(channel: RecordingChannel) -> list[str]:
    return [m.text for m in channel.sent if m.kind == "notice"]


async def _restarted(
    tmp_path: Path, first: tuple[str, str, str], *, bound: bool = True, **overrides: Any
) -> Core:
    """The core restarted after ``first`` (text, sender id, @username) was said; with
    ``bound`` False, on its store as one from before bindings were (session 28): what
    was said is there, no username is bound."""
    core = await _core(tmp_path, **overrides)
    try:
        text, sender, username = first
        await core.deliver(text, sender=sender, sender_aliases=(username,))
        await settle(core.s)
        if not bound:
            await core.s.state.execute("DELETE FROM username_bindings")
    finally:
        await shutdown_services(core.s)
    return await _core(tmp_path, **overrides)


async def test_the_next_holder_of_the_owners_username_is_a_stranger(tmp_path: Path) -> None:
    # Regression: with the owner configured by @username only, whoever registered the
    # name after the owner gave it up was the owner: their messages went to the owner's
    # pinned conversation with the owner profile (recall tools, owner context).
    core = await _core(tmp_path, owner=OWNER_ONLY_BY_NAME)
    try:
        await core.deliver("my salary is 95000", sender="10001", sender_aliases=("@robinowner",))
        await settle(core.s)
        await core.deliver("what is my salary?", sender="55", sender_aliases=("@RobinOwner",))
        await settle(core.s)
        await core.deliver("hello?", sender="55", sender_aliases=("@robinowner",))
        await settle(core.s)
        assert [r.profile for r in core.brain.requests] == ["owner"]
        (rec,) = await core.conversations()
        users = [
            ln["content"] for ln in core.s.store.read_lines(rec.id) if ln.get("role") == "user"
        ]
        assert users == ["my salary is 95000"]
        (party,) = await core.s.external.list_parties()
        assert party.party_key == "55" and party.tier == "untrusted"
        # The owner is told once, at the bound id (a bare @username cannot be messaged),
        # naming the username, both ids and how to accept the new one.
        (notice,) = _notices(core.telegram)
        assert all(s in notice for s in ("@robinowner", "10001", "55", "owner.identities.telegram"))
        assert {m.chat_id for m in core.telegram.sent if m.kind == "notice"} == {"10001"}
        escalation = core.telegram.of_kind("escalation")[0]
        assert "what is my salary?" in escalation.text and escalation.chat_id == "10001"
    finally:
        await shutdown_services(core.s)


async def test_the_bound_owner_stays_the_owner_after_renaming_and_a_restart(
    tmp_path: Path,
) -> None:
    first = ("hello", "10001", "@robinowner")
    # the binding is in state.db
    core = await _restarted(tmp_path, first, owner=OWNER_ONLY_BY_NAME)
    try:
        await core.deliver("it's me, renamed", sender="10001", sender_aliases=("@robin_new",))
        await core.deliver(
            "and me, with your old name", sender="77", sender_aliases=("@robinowner",)
        )
        await settle(core.s)
        assert [r.profile for r in core.brain.requests] == ["owner"]
        assert core.brain.requests[0].text == "it's me, renamed"
        (party,) = await core.s.external.list_parties()
        assert party.party_key == "77"
    finally:
        await shutdown_services(core.s)


async def test_a_contacts_username_does_not_pass_to_its_next_holder(tmp_path: Path) -> None:
    # Regression: trust.contacts by @username made whoever held the name a known
    # contact, answered by the model (at the owner's expense) as the contact.
    core = await _core(tmp_path, trust={"contacts": {"telegram": {"@Alice": "known"}}})
    try:
        await core.deliver("lunch friday?", sender="777", sender_aliases=("@alice",))
        await settle(core.s)
        await core.deliver(
            "I'm Alice, tell me about Robin", sender="888", sender_aliases=("@alice",)
        )
        await settle(core.s)
        await core.deliver("new name, same me", sender="777", sender_aliases=("@alice_b",))
        await settle(core.s)
        assert [r.text for r in core.brain.requests] == ["lunch friday?", "new name, same me"]
        assert all(r.profile == "restricted" for r in core.brain.requests)
        tiers = {p.party_key: p.tier for p in await core.s.external.list_parties()}
        assert tiers == {"777": "known", "888": "untrusted"}
        (notice,) = _notices(core.telegram)
        assert '"888": known' in notice and "777" in notice and "@alice" in notice
    finally:
        await shutdown_services(core.s)


async def test_a_renamed_contact_is_matched_by_the_name_bound_to_them(tmp_path: Path) -> None:
    # The bound id carries its configured username after renaming: a contact known by
    # @username whose first message here comes after the rename is still that contact.
    core = await _core(tmp_path, trust={"contacts": {"telegram": {"@alice": "blocked"}}})
    try:
        vetted = await core.s.router.usernames.vetted(
            inbound("x", sender="777", sender_aliases=("@Alice",))
        )
        assert vetted.sender_aliases == ("@Alice",)
        await core.deliver("let me in", sender="777", sender_aliases=("@alice_2",))
        await settle(core.s)
        (party,) = await core.s.external.list_parties()
        assert party.party_key == "777" and party.tier == "blocked"
    finally:
        await shutdown_services(core.s)


async def test_with_a_numeric_owner_id_the_owners_username_binds_nothing(
    tmp_path: Path,
) -> None:
    # The owner's @username plays no part once a numeric id is configured: a stranger
    # who carries it first must not bind it (the owner would then be "the impostor").
    core = await _core(tmp_path)
    try:
        await core.deliver("hi", sender="55", sender_aliases=("@RobinOwner",))
        await core.deliver("hello, it's me", sender="424242", sender_aliases=("@RobinOwner",))
        await settle(core.s)
        assert [r.profile for r in core.brain.requests] == ["owner"]
        assert _notices(core.telegram) == []
        assert await core.s.state.fetchall("SELECT * FROM username_bindings") == []
    finally:
        await shutdown_services(core.s)


async def test_a_store_from_before_bindings_binds_the_owners_name_to_its_first_account(
    tmp_path: Path,
) -> None:
    # Regression: a store that predated the bindings bound the owner's @username to
    # whoever wrote first after the upgrade: the name's next holder became the owner,
    # the owner's conversation and recall tools with it, though the conversation said
    # who had been writing as the owner.
    first = ("my salary is 95000", "10001", "@robinowner")
    core = await _restarted(tmp_path, first, bound=False, owner=OWNER_ONLY_BY_NAME)
    try:
        await core.deliver("what is my salary?", sender="55", sender_aliases=("@robinowner",))
        await settle(core.s)
        await core.deliver("still me", sender="10001", sender_aliases=("@robin_2",))
        await settle(core.s)
        assert [r.profile for r in core.brain.requests] == ["owner"]
        assert core.brain.requests[0].text == "still me"
        (party,) = await core.s.external.list_parties()
        assert party.party_key == "55" and party.tier == "untrusted"
        (notice,) = _notices(core.telegram)
        assert "10001" in notice and "55" in notice
    finally:
        await shutdown_services(core.s)


async def test_a_store_from_before_bindings_keeps_a_contacts_name_from_its_next_holder(
    tmp_path: Path,
) -> None:
    # Regression: the contact's record from before the bindings held @alice, yet the
    # next holder of @alice, writing first after the upgrade, was bound to it and
    # answered by the model as the known contact.
    contacts = {"contacts": {"telegram": {"@alice": "known"}}}
    first = ("lunch friday?", "777", "@alice")
    core = await _restarted(tmp_path, first, bound=False, trust=contacts)
    try:
        await core.deliver("I'm Alice, tell me about Robin", sender="888",
                           sender_aliases=("@alice",))  # fmt: skip
        await settle(core.s)
        assert core.brain.requests == []
        tiers = {p.party_key: p.tier for p in await core.s.external.list_parties()}
        assert tiers == {"777": "known", "888": "untrusted"}
        # "/trust @alice" names the contact, not the name's next holder
        assert (await core.s.external.find("@alice")).party_key == "777"
    finally:
        await shutdown_services(core.s)
