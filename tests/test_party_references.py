"""How the owner names a party in /trust, /block and /reply: a display name is the
party's own choice, so it never outranks who a party is (their id, address, handle),
and a name two parties share names neither."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

OWNER = "424242"
BOB = "bob@else.example.com"


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Any]:
    services = await open_services(telegram_config(tmp_path), brain=ScriptedBrain())
    services.test_channels = {n: RecordingChannel(n) for n in ("telegram", "email")}
    for channel in services.test_channels.values():
        await attach_channel(services, channel)
    try:
        yield services
    finally:
        await shutdown_services(services)


async def say(s: Any, text: str, **fields: Any) -> None:
    fields.setdefault("sender", OWNER)
    await s.router.deliver(inbound(text, **fields))
    await settle(s)


async def _bob_then_impostor(s: Any, impostor_name: str) -> None:
    await say(s, "Hello, Bob here", channel="email", sender=BOB, sender_name="Bob", chat=BOB)
    # written after Bob's: the newest record used to win
    await say(s, "hi", sender="6666", sender_name=impostor_name)


async def test_a_display_name_never_takes_a_partys_address(core: Any) -> None:
    # Regression: /reply matched display names alongside addresses and took the party
    # that wrote last: a Telegram stranger who called themselves "bob@else.example.com"
    # received the owner's "/reply bob@else.example.com <the door code>".
    await _bob_then_impostor(core, BOB)
    await say(core, f"/reply {BOB} the door code is 4590")
    (to_bob,) = [m for m in core.test_channels["email"].sent if m.kind == "reply"]
    assert to_bob.chat_id == BOB and to_bob.text == "the door code is 4590"
    assert not any("4590" in m.text for m in core.test_channels["telegram"].sent[:-1])
    await say(core, f"/block {BOB}")
    bob = await core.external.find(BOB)
    assert bob.channel == "email" and bob.tier == "blocked"


async def test_a_name_two_parties_share_names_neither(core: Any) -> None:
    await _bob_then_impostor(core, "Bob")
    await say(core, "/reply bob the door code is 4590")
    answer = core.test_channels["telegram"].sent[-1]
    assert answer.chat_id == OWNER and "4590" not in answer.text
    bob, impostor = await core.external.find(BOB), await core.external.find("6666")
    assert bob.id in answer.text and impostor.id in answer.text
    sent = [*core.test_channels["email"].sent, *core.test_channels["telegram"].sent]
    assert not any("4590" in m.text for m in sent if m.kind == "reply")
    # a name only one party has still names them
    await say(core, "hello", sender="7777", sender_name="Carol")
    await say(core, "/trust carol")
    assert (await core.external.find("7777")).tier == "known"


async def test_a_username_two_accounts_wrote_with_names_neither(core: Any) -> None:
    # Regression: a Telegram @username passes to whoever registers it next, and
    # "/reply @eve ..." went to whichever account carrying it wrote last: the owner's
    # words for the Eve they had trusted reached the name's next holder.
    await say(core, "hi, Eve here", sender="7001", sender_name="Eve", sender_aliases=("@eve",))
    await say(core, "/trust @eve")
    await say(core, "it's Eve", sender="7002", sender_name="Eve", sender_aliases=("@Eve",))
    await say(core, "/reply @eve the door code is 4590")
    sent = core.test_channels["telegram"].sent
    assert not any("4590" in m.text for m in sent if m.chat_id != OWNER)
    answer = sent[-1].text
    assert "nothing was done" in answer and "7001" in answer and "7002" in answer
    tiers = {p.party_key: p.tier for p in await core.external.list_parties()}
    assert tiers == {"7001": "known", "7002": "untrusted"}
    # the id still names one of them
    (party,) = [p for p in await core.external.list_parties() if p.party_key == "7002"]
    await say(core, f"/block {party.id}")
    assert (await core.external.get(party.id)).tier == "blocked"
