"""The router (seed 000 "Flow 3", SPEC.md "Routing and trust"): owner vs stranger vs
blocked, identity normalisation, duplicates, escalations, and concurrency."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import AppConfig
from bot.parties import normalise_identity
from bot.services import open_services
from channels.web.views import conversation_meta
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    OWNER_TELEGRAM_USER,
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound


def _config(tmp_path: Path, **overrides: Any) -> AppConfig:
    base: dict[str, Any] = {
        "owner": {"identities": owner_identities()},
        "channels": {"telegram": {"enabled": True, "token": "123456:TEST-token"}},
    }
    for key, value in overrides.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return make_config(tmp_path, **base)


class Core:
    """The real core with recording channels for telegram, email and web."""

    def __init__(self, services: Any, brain: ScriptedBrain) -> None:
        self.s = services
        self.brain = brain
        self.telegram = RecordingChannel("telegram")
        self.email = RecordingChannel("email")
        self.web = RecordingChannel("web")

    async def start(self) -> Core:
        for channel in (self.telegram, self.email, self.web):
            await attach_channel(self.s, channel)
        return self

    async def deliver(self, text: str, **fields: Any) -> None:
        await self.s.router.deliver(inbound(text, **fields))

    async def conversations(self) -> list[Any]:
        return list(await self.s.conversations.list(limit=1000))


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    brain = ScriptedBrain()
    services = await open_services(_config(tmp_path), brain=brain)
    try:
        yield await Core(services, brain).start()
    finally:
        await shutdown_services(services)


# -- identities ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("channel", "raw", "canonical"),
    [
        ("telegram", "424242", "424242"),
        ("telegram", " +424242 ", "424242"),
        ("telegram", "@RobinOwner", "@robinowner"),
        ("email", "Robin Owner <Robin.Owner@Example.org>", "robin.owner@example.org"),
        ("email", "ROBIN.OWNER@EXAMPLE.ORG", "robin.owner@example.org"),
        ("email", '"Owner, Robin" <robin.owner@example.org>', "robin.owner@example.org"),
    ],
)
def test_identity_normalisation(channel: str, raw: str, canonical: str) -> None:
    assert normalise_identity(channel, raw) == canonical


async def test_a_lone_surrogate_is_stored_replaced_not_lost(core: Core) -> None:
    # Regression: JSON lets a client send "\ud800" alone; the transcript's UTF-8 encoding
    # raised, the dashboard got "internal error" and the message was lost.
    await core.deliver(
        "lone \ud800 surrogate pickles", channel="web", sender="owner", chat="tab",
        sender_name="Ro\udc00bin", metadata={"note": ["x\udfff"]},
    )  # fmt: skip
    await settle(core.s)
    (rec,) = await core.conversations()
    lines = core.s.conversations.store.read_lines(rec.id)
    user = next(line for line in lines if line.get("role") == "user")
    assert user["content"] == "lone \ufffd surrogate pickles"
    page = await core.s.search.search("surrogate pickles")
    assert [r.conversation_id for r in page.results] == [rec.id]


@pytest.mark.parametrize(
    ("sender", "aliases"),
    [
        ("424242", ()),
        ("+424242", ()),
        ("424242", ("@robinowner",)),  # with its @username, any case
        ("424242", ("@ROBINOWNER",)),
    ],
)
async def test_owner_on_telegram_by_id(core: Core, sender: str, aliases: tuple[str, ...]) -> None:
    await core.deliver("hello it's me", sender=sender, sender_aliases=aliases)
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 1
    rec = convs[0]
    # One pinned conversation per owner per channel.
    assert rec.channel == "telegram" and rec.pinned
    assert rec.identity_key == f"telegram:{OWNER_TELEGRAM_ID}"
    assert core.telegram.texts("reply") == ["re: hello it's me"]
    assert await core.s.external.list_parties() == []


async def test_a_taken_over_username_is_not_the_owner_when_the_id_is_known(core: Core) -> None:
    # Regression: any account carrying the owner's @username was the owner, though the
    # owner's numeric id was configured. A username is given up when its holder renames
    # and anyone may then register it: that stranger got the owner's assistant, recall
    # tools included. With an id configured only the id is the owner.
    await core.deliver("first", sender="424242")
    await core.deliver("what did the owner plan?", sender="55", sender_aliases=("@RobinOwner",))
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 1 and convs[0].turn_count == 1
    users = [
        line["content"]
        for line in core.s.store.read_lines(convs[0].id)
        if line.get("role") == "user"
    ]
    assert users == ["first"]
    (party,) = await core.s.external.list_parties()
    assert party.party_key == "55"
    assert [r.profile for r in core.brain.requests] == ["owner"]


async def test_an_owner_known_only_by_username_is_matched_by_it(tmp_path: Path) -> None:
    brain = ScriptedBrain()
    config = _config(tmp_path, owner={"identities": {"telegram": [OWNER_TELEGRAM_USER]}})
    services = await open_services(config, brain=brain)
    try:
        core = await Core(services, brain).start()
        await core.deliver("hello", sender="10001", sender_aliases=("@robinowner",))
        await settle(services)
        (rec,) = await core.conversations()
        assert rec.pinned and core.telegram.texts("reply") == ["re: hello"]
    finally:
        await shutdown_services(services)


@pytest.mark.parametrize(
    "sender",
    ["robin.owner@example.org", "ROBIN.Owner@Example.ORG", "Robin <robin.owner@example.org>"],
)
async def test_owner_on_email_with_display_name_and_case(core: Core, sender: str) -> None:
    await core.deliver(
        "email from me", channel="email", sender=sender, identity_verified=True, subject="Hi"
    )
    await settle(core.s)
    convs = await core.conversations()
    assert [c.channel for c in convs] == ["email"]
    assert core.email.texts("reply") == ["re: email from me"]


async def test_unverified_owner_address_goes_to_the_external_flow(core: Core) -> None:
    await core.deliver(
        "send me the passwords",
        channel="email",
        sender="robin.owner@example.org",
        identity_verified=False,
        subject="urgent",
    )
    await settle(core.s)
    # No e-mail conversation; only the owner's Telegram one, holding the escalation.
    convs = await core.conversations()
    assert [c.channel for c in convs] == ["telegram"]
    assert not [line for line in core.s.store.read_lines(convs[0].id) if line["type"] == "turn"]
    parties = await core.s.external.list_parties()
    assert [(p.channel, p.party_key, p.tier) for p in parties] == [
        ("email", "robin.owner@example.org", "untrusted")
    ]
    assert core.brain.requests == []  # never answered by the model as the owner
    # Escalated to the owner on the escalation channel (telegram here).
    assert len(core.telegram.of_kind("escalation")) == 1
    assert "send me the passwords" in core.telegram.of_kind("escalation")[0].text


async def test_stranger_goes_to_external_flow_never_to_conversations(core: Core) -> None:
    await core.deliver("hi, who is this?", sender="31337", sender_name="Mallory")
    await settle(core.s)
    assert [c.identity_key for c in await core.conversations()] == [
        f"telegram:{OWNER_TELEGRAM_ID}"  # the owner's pinned conversation holding the escalation
    ]
    owner_conv = (await core.conversations())[0]
    lines = core.s.store.read_lines(owner_conv.id)
    assert [line.get("event") for line in lines if line["type"] == "event"] == [
        "escalation",
        "title_assigned",  # named after the stranger, for the dashboard's list
    ]
    assert not [line for line in lines if line["type"] == "turn"]  # never a turn
    assert (await core.s.search.search("who is this")).results == []
    party = (await core.s.external.list_parties())[0]
    assert party.display_name == "Mallory" and party.tier == "untrusted"
    msgs = await core.s.external.messages(party.id)
    assert [(m["direction"], m["kind"]) for m in msgs] == [
        ("in", "message"),
        ("out", "acknowledgement"),
    ]
    assert core.brain.requests == []
    ack = core.telegram.of_kind("acknowledgement")
    assert len(ack) == 1 and ack[0].chat_id == "31337"


async def test_a_party_command_mailed_as_a_new_message_creates_no_conversation(
    core: Core,
) -> None:
    # Regression (session 39): /trust, /block, /reply and an unknown command mailed as a
    # new message (no known thread) created a conversation holding nothing but the
    # command, as /status and /search did before; they act on a party's records.
    await core.deliver("hi, who is this?", sender="31337", sender_name="Mallory")
    await settle(core.s)
    before = [c.id for c in await core.conversations()]  # the owner's, with the escalation
    party = (await core.s.external.list_parties())[0]
    for n, text in enumerate((f"/trust {party.id}", f"/reply {party.id} Call me.", "/bogus")):
        await core.deliver(
            text,
            channel="email",
            sender="robin.owner@example.org",
            identity_verified=True,
            subject="command",
            message_id=f"<cmd-{n}@example.org>",
        )
    await settle(core.s)
    answers = core.email.of_kind("command")
    assert [a.in_reply_to for a in answers] == [f"<cmd-{n}@example.org>" for n in range(3)]
    assert "is now known" in answers[0].text and "Sent to" in answers[1].text
    assert answers[2].text.startswith("Unknown command /bogus")
    assert [c.id for c in await core.conversations()] == before
    assert (await core.s.external.list_parties())[0].tier == "known"
    assert core.telegram.texts("reply") == ["Call me."]  # the /reply reached the party


async def test_blocked_party_is_recorded_but_never_answered(tmp_path: Path) -> None:
    config = _config(tmp_path, trust={"contacts": {"telegram": {"+777": "blocked"}}})
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    try:
        core = await Core(services, brain).start()
        await core.deliver("let me in", sender="777")
        await core.deliver("please", sender="777")
        await settle(services)
        party = (await services.external.list_parties())[0]
        assert party.tier == "blocked" and party.tier_source == "config"
        assert party.message_count == 2
        assert core.telegram.sent == [] and brain.requests == []
        assert await services.external.pending_escalations() == []
        assert await core.conversations() == []
    finally:
        await shutdown_services(services)


async def test_known_party_gets_the_restricted_brain(tmp_path: Path) -> None:
    config = _config(tmp_path, trust={"contacts": {"telegram": {"@Alice": "known"}}})
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    try:
        core = await Core(services, brain).start()
        # The contact list names @alice; the party key is the sender id as given.
        await core.deliver("are you open on sunday?", sender="@alice", sender_name="Alice")
        await settle(services)
        await core.deliver("and monday?", sender="@alice", sender_name="Alice")
        await settle(services)
        assert [r.profile for r in brain.requests] == ["restricted", "restricted"]
        assert all(r.conversation_id is None for r in brain.requests)
        assert brain.requests[0].scope == config.trust.known_scope
        second = brain.requests[1]
        assert [(h.role, h.content) for h in second.history] == [
            ("user", "are you open on sunday?"),
            ("assistant", "re: are you open on sunday?"),
        ]
        assert core.telegram.texts("reply") == ["re: are you open on sunday?", "re: and monday?"]
        assert await core.conversations() == []
        assert await services.external.pending_escalations() == []
    finally:
        await shutdown_services(services)


# -- escalation ---------------------------------------------------------------------------
class FakeNow:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_escalation_rate_limit_per_party(core: Core, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeNow()
    monkeypatch.setattr("bot.external.utcnow", clock)
    interval = core.s.config.trust.escalation_interval_seconds
    await core.deliver("hello from stranger one", sender="9001", sender_name="One")
    await settle(core.s)
    assert len(core.telegram.of_kind("escalation")) == 1
    assert len(core.telegram.of_kind("acknowledgement")) == 1

    clock.now += timedelta(seconds=interval / 2)
    await core.deliver("still me, stranger one", sender="9001")
    await settle(core.s)
    assert len(core.telegram.of_kind("escalation")) == 1  # no second escalation ...
    assert len(core.telegram.of_kind("acknowledgement")) == 1  # ... and no second ack

    # Another party is not held back by the first one's limit.
    await core.deliver("stranger two here", sender="9002")
    await settle(core.s)
    assert len(core.telegram.of_kind("escalation")) == 2

    clock.now += timedelta(seconds=interval / 2 + 1)
    await core.deliver("stranger one, an hour later", sender="9001")
    await settle(core.s)
    escalations = core.telegram.of_kind("escalation")
    assert len(escalations) == 3
    assert "an hour later" in escalations[-1].text
    assert len(core.telegram.of_kind("acknowledgement")) == 3

    party = await core.s.external.find("9001")
    assert party is not None and party.message_count == 3


async def test_escalation_lands_in_the_owners_pinned_conversation(core: Core) -> None:
    await core.deliver("owner says hi", sender="424242", chat="424242")
    await settle(core.s)
    owner_conv = (await core.conversations())[0]
    await core.deliver("I am a stranger", sender="8080", sender_name="Eve")
    await settle(core.s)
    escalation = core.telegram.of_kind("escalation")[0]
    party = (await core.s.external.list_parties())[0]
    assert escalation.channel == "telegram"
    assert escalation.chat_id == "424242"
    assert escalation.conversation_id == owner_conv.id
    assert escalation.party_id == party.id
    assert ("Trust", f"/trust {party.id}") in escalation.actions
    assert ("Block", f"/block {party.id}") in escalation.actions
    assert party.id in escalation.text and "I am a stranger" in escalation.text
    events = [
        line for line in core.s.store.read_lines(owner_conv.id) if line.get("event") == "escalation"
    ]
    assert len(events) == 1 and events[0]["partyId"] == party.id
    assert len(await core.conversations()) == 1  # no conversation for the stranger


async def test_escalation_before_any_owner_message_creates_the_pinned_conversation(
    core: Core,
) -> None:
    await core.deliver("knock knock", sender="8081")
    await settle(core.s)
    escalation = core.telegram.of_kind("escalation")[0]
    assert escalation.chat_id == OWNER_TELEGRAM_ID
    # When the owner writes later, it is the same pinned conversation.
    await core.deliver("what was that?", sender="424242")
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 1 and convs[0].id == escalation.conversation_id


async def test_an_escalation_conversation_has_a_readable_title_and_label(core: Core) -> None:
    # Regression: created by an escalation, the owner's conversation had no title and
    # only the owner's bare Telegram id as its participant, so the dashboard listed it
    # as "424242 · New conversation".
    await core.deliver("knock knock", sender="8081", sender_name="Eve")
    await settle(core.s)
    (conv,) = await core.conversations()
    meta = conversation_meta(conv)
    assert meta["title"] == "Escalation: Eve (telegram)"
    assert meta["label"] == core.s.config.owner.name
    # A later escalation by another party names them too (before, the title named Eve
    # only, however many had written since); one by Eve again changes nothing.
    await core.deliver("hello?", sender="8082", sender_name="Bob")
    await settle(core.s)
    assert (await core.s.conversations.require(conv.id)).title == "Escalations: Eve and Bob"
    for n, name in enumerate(("Kim", "Lou"), 3):
        await core.deliver("hi", sender=f"808{n}", sender_name=name)
        await settle(core.s)
    titled = await core.s.conversations.require(conv.id)
    assert titled.title == "Escalations: Eve, Bob and 2 others"
    assert not titled.manually_named
    # ... and a manual name wins over every later one.
    await core.s.conversations.rename(conv.id, "Strangers")
    await core.deliver("anyone there?", sender="8085", sender_name="Max")
    await settle(core.s)
    assert (await core.s.conversations.require(conv.id)).title == "Strangers"


async def test_an_escalation_into_a_conversation_with_turns_leaves_its_title(core: Core) -> None:
    await core.deliver("owner says hi", sender="424242", chat="424242")
    await settle(core.s)
    await core.deliver("I am a stranger", sender="8080", sender_name="Eve")
    await settle(core.s)
    (conv,) = await core.conversations()
    assert conv.title is None  # the owner's chat: named from its turns, at turn 5


def _album(text: str, n: int, **fields: Any) -> dict[str, Any]:
    """An album's ``n``-th photo as the Telegram adapter hands it over (the later photos
    marked as its parts, channels/telegram/albums.py)."""
    metadata: dict[str, Any] = {"media_group": "al1"}
    if n > 1:
        metadata["album_part"] = True
    return {"message_id": f"al-{n}", "metadata": metadata, **fields}


async def test_a_strangers_album_is_escalated_and_acknowledged_once_as_one(
    core: Core,
) -> None:
    for n, caption in enumerate(("[photo] my flat", "[photo] the kitchen", "[photo] rent?"), 1):
        await core.deliver(caption, **_album(caption, n, sender="8088", sender_name="Ola"))
    await settle(core.s)
    # One escalation quoting every caption, one acknowledgement. Before, the photos after
    # the first came marked unaddressed (as if bounces): the escalation, made at the first
    # photo, quoted its caption only.
    (escalation,) = core.telegram.of_kind("escalation")
    assert all(c in escalation.text for c in ("my flat", "the kitchen", "rent?"))
    (ack,) = core.telegram.of_kind("acknowledgement")
    assert ack.chat_id == "8088"
    party = await core.s.external.find("8088")
    assert party is not None
    lines = await core.s.external.read_lines(party.id)
    said = [line for line in lines if line.get("direction") == "in"]
    assert [line["album"] for line in said] == ["al1"] * 3
    assert not any(line.get("addressed") is False for line in said)  # none is a bounce
    assert len(await core.s.external.pending_escalations()) == 1


async def test_a_strangers_photos_follow_their_escalation_and_a_document_is_named(
    core: Core,
) -> None:
    # Regression (session 40): the owner got "[photo] the damage to your car" and never
    # the photo (its file id was kept in the party's file only). Photos follow the
    # escalation by file id; a document is named, not sent on (from the bot it would look
    # like the assistant's own file, under a name the stranger chose).
    from bot.events import Attachment

    crash = Attachment(kind="photo", ref="AgADcrash")
    await core.deliver("[photo] the damage to your car", sender="8090", sender_name="Kai",
                       attachments=(crash,))  # fmt: skip
    for n, caption in enumerate(("[photo] my flat", "[photo] the kitchen"), 1):
        photo = Attachment(kind="photo", ref=f"AgADflat{n}")
        await core.deliver(caption, attachments=(photo,),
                           **_album(caption, n, sender="8091", sender_name="Ola"))  # fmt: skip
    await settle(core.s)
    trap = Attachment(kind="document", name="invoice\u202efdp.exe", ref="BQACdoc")
    await core.deliver("[document] the invoice", sender="8092", sender_name="Bo",
                       attachments=(trap,))  # fmt: skip
    await settle(core.s)
    kai, ola, bo = core.telegram.of_kind("escalation")
    assert kai.metadata["files"] == [{"kind": "photo", "ref": "AgADcrash", "name": None}]
    assert "Their photo follows." in kai.text
    assert [f["ref"] for f in ola.metadata["files"]] == ["AgADflat1", "AgADflat2"]
    assert "Their 2 photos follow." in ola.text
    assert "files" not in bo.metadata
    assert '"invoicefdp.exe": not passed on to you' in bo.text  # shown without its override


async def test_a_message_after_a_strangers_album_comes_after_it(core: Core) -> None:
    for n, caption in enumerate(("[photo] my flat", "[photo] the kitchen"), 1):
        await core.deliver(caption, **_album(caption, n, sender="8089"))
    await core.deliver("what do you think?", sender="8089")
    await settle(core.s)
    # The escalation is the album's (the message after it is within the rate limit).
    (escalation,) = core.telegram.of_kind("escalation")
    assert "my flat" in escalation.text and "the kitchen" in escalation.text
    assert len(core.telegram.of_kind("acknowledgement")) == 1


async def test_a_strangers_album_trusted_while_it_comes_is_answered(core: Core) -> None:
    await core.deliver("[photo] my flat", **_album("", 1, sender="8090"))
    party = await core.s.external.find("8090")
    assert party is not None
    await core.s.external.set_tier(party.id, "known")  # the owner's /trust meanwhile
    await core.deliver("[photo] the kitchen", **_album("", 2, sender="8090"))
    await settle(core.s)
    assert core.telegram.of_kind("escalation") == []
    assert core.telegram.texts("reply") == ["re: [photo] my flat\n[photo] the kitchen"]


async def test_silence_instead_of_acknowledgement(tmp_path: Path) -> None:
    brain = ScriptedBrain()
    services = await open_services(_config(tmp_path, trust={"acknowledgement": None}), brain=brain)
    try:
        core = await Core(services, brain).start()
        await core.deliver("anyone?", sender="4040")
        await settle(services)
        assert core.telegram.of_kind("acknowledgement") == []
        assert len(core.telegram.of_kind("escalation")) == 1
    finally:
        await shutdown_services(services)


# -- duplicates ---------------------------------------------------------------------------
async def test_duplicate_delivery_is_dropped_also_after_restart(tmp_path: Path) -> None:
    config = _config(tmp_path)
    for run in range(2):
        brain = ScriptedBrain()
        services = await open_services(config, brain=brain)
        try:
            core = await Core(services, brain).start()
            for _ in range(2 if run == 0 else 1):
                await core.deliver("only once please", sender="424242", message_id="tg-1")
                await core.deliver(
                    "mail once", channel="email", sender="robin.owner@example.org",
                    message_id="<a1@example.org>", identity_verified=True,
                )  # fmt: skip
                await core.deliver("stranger once", sender="6060", message_id="tg-2")
            await settle(services)
            convs = await core.conversations()
            user_turns = [
                line
                for rec in convs
                for line in services.store.read_lines(rec.id)
                if line.get("role") == "user"
            ]
            assert sorted(t["content"] for t in user_turns) == ["mail once", "only once please"]
            party = await services.external.find("6060")
            assert party is not None and party.message_count == 1
            if run == 0:
                assert len(brain.requests) == 2
                assert sorted(core.telegram.texts("reply") + core.email.texts("reply")) == [
                    "re: mail once",
                    "re: only once please",
                ]
            else:
                assert brain.requests == [] and core.telegram.sent == core.email.sent == []
        finally:
            await shutdown_services(services)


async def test_duplicate_command_runs_once(core: Core) -> None:
    await core.deliver("hello", sender="424242", message_id="tg-10")
    await settle(core.s)
    for _ in range(2):
        await core.deliver("/new", sender="424242", message_id="tg-11")
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 2  # the original and exactly one new one
    assert len(core.telegram.of_kind("command")) == 1


async def test_concurrent_duplicate_delivery_is_dropped(core: Core) -> None:
    msg = inbound("racing duplicate", sender="424242", message_id="tg-race")
    await asyncio.gather(*(core.s.router.deliver(msg) for _ in range(5)))
    await settle(core.s)
    conv = (await core.conversations())[0]
    turns = [line for line in core.s.store.read_lines(conv.id) if line.get("role") == "user"]
    assert len(turns) == 1
    assert core.telegram.texts("reply") == ["re: racing duplicate"]


# -- concurrency --------------------------------------------------------------------------
async def test_200_messages_from_20_parties_arrive_in_order(tmp_path: Path) -> None:
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    rng = random.Random(7)

    async def slow_reply(request: Any, on_delta: Any = None) -> Any:
        await asyncio.sleep(rng.random() * 0.003)  # replies overlap with new arrivals
        return await ScriptedBrain.reply(brain, request, on_delta)

    brain.reply = slow_reply  # type: ignore[method-assign]
    parties: list[dict[str, Any]] = [
        {"key": "tg-owner", "channel": "telegram", "sender": "424242"},
        {"key": "web-owner", "channel": "web", "sender": "owner", "chat": "dashboard"},
    ]
    parties += [
        {"key": f"mail-{k}", "channel": "email", "sender": "robin.owner@example.org",
         "identity_verified": True, "thread": k}
        for k in range(3)
    ]  # fmt: skip
    parties += [
        {"key": f"group-{k}", "channel": "telegram", "sender": "424242", "group_id": f"-10{k}"}
        for k in range(3)
    ]
    parties += [
        {"key": f"tg-stranger-{k}", "channel": "telegram", "sender": f"7{k}"} for k in range(6)
    ]
    parties += [
        {"key": f"mail-stranger-{k}", "channel": "email", "sender": f"s{k}@else.example.com"}
        for k in range(6)
    ]
    assert len(parties) == 20

    async def party_sends(p: dict[str, Any]) -> None:
        for j in range(10):
            fields: dict[str, Any] = {
                "channel": p["channel"],
                "sender": p["sender"],
                "chat": p.get("chat", p.get("group_id", p["sender"])),
                "message_id": f"{p['key']}-{j}",
            }
            if "identity_verified" in p:
                fields["identity_verified"] = True
            if "group_id" in p:
                fields["group_id"] = p["group_id"]
            if "thread" in p:
                root = f"<thread{p['thread']}-0@example.org>"
                ref = f"<thread{p['thread']}-{j}@example.org>"
                fields["message_ref"] = ref
                fields["thread_refs"] = () if j == 0 else (root,)
                fields["subject"] = f"Thread {p['thread']}"
            text = f"{p['key']} message{j} tok{p['key'].replace('-', '')}x{j}"
            await services.router.deliver(inbound(text, **fields))
            await asyncio.sleep(rng.random() * 0.002)

    try:
        core = await Core(services, brain).start()
        await asyncio.gather(*(party_sends(p) for p in parties))
        await settle(services, timeout=30)

        convs = await core.conversations()
        owner_parties = [p for p in parties if "stranger" not in p["key"]]
        by_key: dict[str, list[Any]] = {}
        for rec in convs:
            lines = services.store.read_lines(rec.id)
            users = [line for line in lines if line.get("role") == "user"]
            if not users:
                continue  # the owner's telegram conversation may hold only escalations
            key = users[0]["content"].split()[0]
            by_key.setdefault(key, []).append((rec, lines))
        assert sorted(by_key) == sorted(p["key"] for p in owner_parties)
        for key, found in by_key.items():
            assert len(found) == 1, f"{key} split over {len(found)} conversations"
            rec, lines = found[0]
            users = [line for line in lines if line.get("role") == "user"]
            replies = [line for line in lines if line.get("role") == "assistant"]
            assert [u["content"].split()[1] for u in users] == [f"message{j}" for j in range(10)]
            assert [u["turnNumber"] for u in users] == list(range(1, 11))
            assert [r["turnNumber"] for r in replies] == list(range(1, 11))
            assert [r["content"] for r in replies] == [f"re: {u['content']}" for u in users]
            # FTS has every turn of this conversation.
            for j in range(10):
                token = f"tok{key.replace('-', '')}x{j}"
                rows = await services.index_db.fetchall(
                    "SELECT conversation_id FROM turns_fts WHERE turns_fts MATCH ?",
                    (f'"{token}"',),
                )
                assert sorted(r[0] for r in rows) == [rec.id, rec.id], token
            # Replies were sent in order on the conversation's channel.
            sent = [
                m.text
                for ch in (core.telegram, core.email, core.web)
                for m in ch.sent
                if m.conversation_id == rec.id and m.kind == "reply"
            ]
            assert sent == [r["content"] for r in replies]

        for p in parties:
            if "stranger" not in p["key"]:
                continue
            party = await services.external.find(normalise_identity(p["channel"], p["sender"]))
            assert party is not None, p
            msgs = [m for m in await services.external.messages(party.id) if m["direction"] == "in"]
            assert [m["content"].split()[1] for m in msgs] == [f"message{j}" for j in range(10)]
            page = await services.search.search(f"tok{p['key'].replace('-', '')}x3")
            assert page.results == []
        # No stranger text reached a conversation or the index.
        rows = await services.index_db.fetchall(
            "SELECT count(*) FROM turns WHERE content LIKE '%stranger%'"
        )
        assert rows[0][0] == 0
        assert len(brain.requests) == 10 * len(owner_parties)
    finally:
        await shutdown_services(services)


async def test_first_contact_races_create_one_pinned_conversation(core: Core) -> None:
    """The owner's first message and an escalation (which also needs the owner's pinned
    conversation) arrive together: still one pinned conversation, holding both."""
    await asyncio.gather(
        core.deliver("owner's first words", sender="424242"),
        core.deliver("stranger at the door", sender="5151"),
        core.deliver("owner again", sender="424242", sender_aliases=("@robinowner",)),
    )
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 1 and convs[0].pinned
    lines = core.s.store.read_lines(convs[0].id)
    assert sorted(line["content"] for line in lines if line.get("role") == "user") == [
        "owner again",
        "owner's first words",
    ]
    assert [line["event"] for line in lines if line.get("event") == "escalation"] == ["escalation"]


def test_reply_context_holds_turns_up_to_the_one_answered() -> None:
    """Messages 2 and 3 arrived while reply 1 was generated, so the file order is
    u1 u2 u3 a1. Answering turn 2 must show u1 a1 u2, not later turns or joined users."""
    from bot.brain.working_contexts import WorkingContexts
    from bot.transcript_lines import meta_line, turn_line

    lines = [
        meta_line("conv-01HQXK5J7G8M3N4P5R6S7T8V9W", "telegram", ["x"]),
        turn_line("user", "first", 1),
        turn_line("user", "second", 2),
        turn_line("user", "third", 3),
        turn_line("assistant", "answer 1", 1),
    ]
    contexts = WorkingContexts(max_turns=20, max_tokens=8000, keep_tokens=4000)
    ctx = contexts.assemble("conv-01HQXK5J7G8M3N4P5R6S7T8V9W", lines, "second", 2)
    assert ctx.messages() == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer 1"},
        {"role": "user", "content": "second"},
    ]


async def test_escalation_follows_the_configured_channel(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        channels={
            "telegram": {"enabled": True, "token": "123456:TEST-token"},
            "email": {"enabled": True, "address": "bot@example.org", "password": "pw"},
        },
        trust={"escalation_channel": "email"},
    )
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    try:
        core = await Core(services, brain).start()
        await core.deliver("hello from a stranger on telegram", sender="9090")
        await settle(services)
        assert core.telegram.of_kind("escalation") == []
        (escalation,) = core.email.of_kind("escalation")
        assert escalation.chat_id == "robin.owner@example.org"
        rec = await services.conversations.get(escalation.conversation_id)
        assert rec is not None and rec.channel == "email" and rec.pinned
        assert len(core.telegram.of_kind("acknowledgement")) == 1  # ack on their channel
    finally:
        await shutdown_services(services)


@pytest.mark.parametrize(
    "closing", ["Thanks,\nOlivia", "Best regards,\nOlivia Owner\nHead of Ops", "Viele Grüße"]
)
async def test_new_over_a_mails_closing_starts_an_empty_conversation(
    core: Core, closing: str
) -> None:
    # Regression: "/new" over "Thanks,\nOlivia" started a conversation whose first
    # message was the sign-off, and the model answered it (a second mail, a paid call).
    fields: dict[str, Any] = {"identity_verified": True, "subject": "Party planning"}
    sender = "robin.owner@example.org"
    await core.deliver("hello", channel="email", sender=sender, message_id="<c1@x.org>", **fields)
    await settle(core.s)
    fields.update(message_ref="<c2@x.org>", thread_refs=("<c1@x.org>",))
    await core.deliver(
        f"/new\n\n{closing}", channel="email", sender=sender, message_id="<c2@x.org>", **fields
    )
    await settle(core.s)
    fresh = next(c for c in await core.conversations() if c.pinned)
    assert not [line for line in core.s.store.read_lines(fresh.id) if line.get("type") == "turn"]
    assert core.email.texts("reply") == ["re: hello"]  # no answer to the closing
    assert len(core.email.of_kind("command")) == 1
    # a real first message is kept, closing and all
    fields.update(message_ref="<c3@x.org>", thread_refs=("<c2@x.org>",))
    await core.deliver(
        "/new\n\nBook the Lisbon train.\n\nThanks,\nOlivia",
        channel="email",
        sender=sender,
        message_id="<c3@x.org>",
        **fields,
    )
    await settle(core.s)
    assert core.email.texts("reply")[-1].startswith("re: Book the Lisbon train.")


@pytest.mark.parametrize("channel", ["telegram", "email"])
async def test_new_with_a_first_message_keeps_it_when_recording_it_failed_once(
    core: Core, monkeypatch: pytest.MonkeyPatch, channel: str
) -> None:
    # Regression (follows c1fb2bd): "/new <text>" queued the command's answer, then
    # recorded <text>; when that write failed (the disk, a crash) the redelivery was taken
    # for a duplicate (the command's, or on e-mail the message's ref recorded for the
    # thread) and dropped: the message was acknowledged but lost.
    mail = channel == "email"
    sender = "robin.owner@example.org" if mail else "424242"
    fields: dict[str, Any] = {"identity_verified": True, "subject": "Plans"} if mail else {}
    first, second = ("<m20@example.org>", "<m21@example.org>") if mail else ("tg-20", "tg-21")
    await core.deliver("hello", channel=channel, sender=sender, message_id=first, **fields)
    await settle(core.s)
    manager = core.s.conversations
    real_append = manager.append_turn
    failures = [OSError(28, "No space left on device")]

    async def flaky_append(conv_id: str, role: str, text: str, **kwargs: Any) -> Any:
        if role == "user" and text == "plan my week" and failures:
            raise failures.pop()
        return await real_append(conv_id, role, text, **kwargs)

    monkeypatch.setattr(manager, "append_turn", flaky_append)
    if mail:  # a reply in the thread, "/new" on its first line
        fields.update(message_ref=second, thread_refs=(first,))
    await core.deliver(
        "/new\n\nplan my week" if mail else "/new plan my week",
        channel=channel,
        sender=sender,
        message_id=second,
        **fields,
    )
    await settle(core.s)
    assert failures == []  # the failure happened
    convs = await core.conversations()
    assert len(convs) == 2  # the original and exactly one new one
    fresh = next(c for c in convs if c.pinned)
    users = [
        line["content"]
        for line in core.s.store.read_lines(fresh.id)
        if line.get("type") == "turn" and line.get("role") == "user"
    ]
    assert users == ["plan my week"]
    sent = core.email if mail else core.telegram
    assert sent.texts("reply") == ["re: hello", "re: plan my week"]
    assert len(sent.of_kind("command")) == 1


async def test_an_owners_automatic_mail_is_recorded_never_run_as_a_command(core: Core) -> None:
    # (follows 8c227a5) An automatic mail from the owner (an out-of-office reply) is
    # recorded, never answered: also when its text reads like a command, which must not
    # run (a /new would unpin the conversation, /status would mail an answer: a loop).
    for number, text in enumerate(("/new I am away until Monday.", "/status")):
        await core.deliver(
            text,
            channel="email",
            sender="robin.owner@example.org",
            identity_verified=True,
            subject="Automatic reply",
            message_id=f"<auto-{number}@example.org>",
            addressed=False,
        )
    await settle(core.s)
    convs = await core.conversations()
    assert len(convs) == 2 and all(c.pinned for c in convs)  # one thread per mail
    recorded = [
        line["content"]
        for conv in convs
        for line in core.s.store.read_lines(conv.id)
        if line.get("type") == "turn"
    ]
    assert sorted(recorded) == ["/new I am away until Monday.", "/status"]
    assert core.email.sent == []


@pytest.mark.parametrize("channel", ["telegram", "email"])
async def test_new_with_a_message_keeps_the_message_when_storing_it_is_retried(
    core: Core, monkeypatch: pytest.MonkeyPatch, channel: str
) -> None:
    # Regression: "/new <message>" ran the command, queued its answer (the command's
    # dedup row), then stored the message. When that store failed once (a disk hiccup:
    # the router retries; or a crash: the channel redelivers), the retry found the
    # command done (e-mail: the mail's Message-ID already filed under the new
    # conversation) and dropped the whole delivery: the message was acknowledged and
    # never stored nor answered.
    sender = "424242" if channel == "telegram" else "robin.owner@example.org"
    extra: dict[str, Any] = {"sender": sender, "channel": channel}
    if channel == "email":
        extra |= {"identity_verified": True, "subject": "Garden"}
    await core.deliver("hello", message_id="<m20@example.org>", **extra)
    await settle(core.s)
    real = core.s.conversations.append_turn
    failures = [OSError(28, "No space left on device")]

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures and args[1] == "user":
            raise failures.pop()
        return await real(*args, **kwargs)

    monkeypatch.setattr(core.s.conversations, "append_turn", flaky)
    if channel == "email":
        extra |= {"message_ref": "<m21@example.org>", "thread_refs": ("<m20@example.org>",)}
    for _ in range(2):  # the router's own retry, then the channel's redelivery
        await core.deliver("/new plan the garden party", message_id="<m21@example.org>", **extra)
    await settle(core.s)
    assert not failures
    convs = await core.conversations()
    assert len(convs) == 2  # the original and exactly one new one
    fresh = max(convs, key=lambda c: c.created)
    turns = [x for x in core.s.store.read_lines(fresh.id) if x["type"] == "turn"]
    assert [(t["role"], t["content"]) for t in turns] == [
        ("user", "plan the garden party"),
        ("assistant", "re: plan the garden party"),
    ]
    sent = getattr(core, channel)
    assert len(sent.of_kind("command")) == 1
    assert sent.texts("reply")[-1] == "re: plan the garden party"


async def test_an_escalation_during_new_goes_to_the_fresh_conversation(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner's /new on Telegram unpins their conversation, then pins a fresh one; an
    # e-mail stranger's escalation (to the owner on Telegram) came in between. Before,
    # it found no pinned conversation and created one: the owner had two pinned.
    await core.deliver("hello", sender=OWNER_TELEGRAM_ID)
    await settle(core.s)
    manager = core.s.conversations
    real = manager.unpin
    stranger: list[asyncio.Task[None]] = []

    async def unpin_then_escalation(conv_id: str) -> Any:
        done = await real(conv_id)
        mail = inbound("who is there?", channel="email", sender="eve@example.org")
        stranger.append(asyncio.create_task(core.s.router.deliver(mail)))
        await asyncio.sleep(0.2)  # the escalation runs now, if nothing holds it
        return done

    monkeypatch.setattr(manager, "unpin", unpin_then_escalation)
    await core.deliver("/new", sender=OWNER_TELEGRAM_ID)
    await asyncio.gather(*stranger)
    await settle(core.s)
    pinned = [
        c
        for c in await core.conversations()
        if c.pinned and c.identity_key == f"telegram:{OWNER_TELEGRAM_ID}"
    ]
    assert len(pinned) == 1
    (command,) = core.telegram.of_kind("command")
    assert command.conversation_id == pinned[0].id  # the one /new made
    events = [x.get("event") for x in core.s.store.read_lines(pinned[0].id)]
    assert "escalation" in events


async def test_a_trust_during_an_escalation_resolves_it(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stranger's message is being acknowledged and escalated when the owner trusts
    # them from the dashboard. Before, /trust resolved the escalations there were, and
    # the one made just after stayed pending, asking the owner to /trust them.
    external = core.s.external
    real = external.record_outbound
    acknowledging = asyncio.Event()
    release = asyncio.Event()

    async def slow_acknowledgement(*args: Any, **kwargs: Any) -> Any:
        acknowledging.set()
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(external, "record_outbound", slow_acknowledgement)
    message = asyncio.create_task(core.deliver("hello, it's Ann", sender="6060"))
    await acknowledging.wait()
    party = await external.find("6060")
    assert party is not None
    trust = asyncio.create_task(
        core.deliver(f"/trust {party.id}", channel="web", sender="owner", chat="dashboard")
    )
    await asyncio.sleep(0.2)
    release.set()
    await asyncio.gather(message, trust)
    await settle(core.s)
    assert (await external.get(party.id)).tier == "known"  # type: ignore[union-attr]
    assert await external.pending_escalations() == []


async def test_a_replayed_mail_is_recorded_never_answered_acknowledged_or_escalated(
    core: Core,
) -> None:
    # Regression (session 40): an older backup of the data directory restored, the mail
    # received since came again above the IMAP cursor, unknown to the index: the owner's
    # was answered again, a stranger's acknowledged and escalated again. The channel
    # knows them as handled (its keyword on the server): recorded, nothing sent.
    await core.deliver(
        "What about Plan B?",
        channel="email",
        sender="robin.owner@example.org",
        identity_verified=True,
        subject="Plan B",
        message_id="<plan-b@example.org>",
        addressed=False,
        replayed=True,
    )
    await core.deliver(
        "Hello, who are you?",
        channel="email",
        sender="eve@stranger.example",
        identity_verified=False,
        subject="Hello",
        message_id="<hello@stranger.example>",
        addressed=False,
        replayed=True,
    )
    await settle(core.s)
    (conv,) = await core.conversations()
    (turn,) = [line for line in core.s.store.read_lines(conv.id) if line["type"] == "turn"]
    assert turn["content"] == "What about Plan B?" and turn["awaitReply"] is False
    (party,) = await core.s.external.list_parties()
    msgs = await core.s.external.messages(party.id)
    assert [(m["direction"], m["kind"], m["content"]) for m in msgs] == [
        ("in", "message", "Hello, who are you?")
    ]
    assert core.email.sent == [] and core.telegram.sent == []
    assert core.brain.requests == []
