"""A party whose tier came from ``trust.contacts`` loses it when the config stops naming
them (SIGHUP or a restart): the owner took them off the list."""

from __future__ import annotations

from pathlib import Path

from bot.services import open_services
from tests.conftest import make_config, owner_identities, settle, shutdown_services
from tests.support import ScriptedBrain
from tests.test_router import Core

GROUP = {"group_id": "-100", "chat": "-100"}


def _trust(tmp_path: Path, contacts: dict[str, str]) -> object:
    """The ``trust`` section a reload reads from the changed config file."""
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        trust={"contacts": {"telegram": contacts}},
    )
    return config.trust


async def test_a_contact_taken_off_the_list_is_no_longer_known(tmp_path: Path) -> None:
    # Regression: the config's tier was written into the party's record and kept when
    # the config stopped naming them: a contact the owner took off the list was still
    # answered by the model, a blocked one still ignored in the owner's groups.
    contacts = {"@alice": "known", "666": "blocked"}
    config = make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        trust={"contacts": {"telegram": contacts}},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
    )
    brain = ScriptedBrain()
    core = await Core(await open_services(config, brain=brain), brain).start()
    try:
        await core.deliver("lunch friday?", sender="777", sender_aliases=("@alice",))
        await core.deliver("let me in", sender="666")
        await settle(core.s)
        assert [r.text for r in brain.requests] == ["lunch friday?"]
        core.s.config.trust = _trust(tmp_path, {})  # what bot.daemon_stop.reload does
        await core.deliver("and saturday?", sender="777", sender_aliases=("@alice",))
        await core.deliver("@bot hello group", sender="666", **GROUP)
        await settle(core.s)
        assert [r.text for r in brain.requests] == ["lunch friday?", "@bot hello group"]
        tiers = {p.party_key: (p.tier, p.tier_source) for p in await core.s.external.list_parties()}
        assert tiers["777"] == ("untrusted", "default")
        escalated = " ".join(m.text for m in core.telegram.of_kind("escalation"))
        assert "and saturday?" in escalated
    finally:
        await shutdown_services(core.s)
