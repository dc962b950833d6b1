"""Slash commands (seed 000 "Slash Commands"): intercepted before any model call, on
every channel; the owner's /trust, /block, /reply act on third parties; strangers never
touch the owner's records."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.command_status import local_minute
from bot.commands import parse_command
from bot.events import TO_ALL, TO_PARTY_ALONE, Attachment
from bot.labels import shown_names
from bot.resume import resume_pending_replies
from bot.services import open_services
from tests.conftest import (
    OWNER_EMAIL,
    OWNER_TELEGRAM_USER,
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

OWNER = "424242"


class Core:
    def __init__(self, services: Any, brain: ScriptedBrain) -> None:
        self.s = services
        self.brain = brain
        self.channels = {n: RecordingChannel(n) for n in ("telegram", "email", "web")}

    @property
    def telegram(self) -> RecordingChannel:
        return self.channels["telegram"]

    async def say(self, text: str, **fields: Any) -> str:
        """Deliver and wait; returns the last thing sent back on that channel."""
        fields.setdefault("sender", OWNER)
        channel = fields.get("channel", "telegram")
        if channel == "web":
            fields.setdefault("chat", "dashboard")
            fields["sender"] = "owner"
        await self.s.router.deliver(inbound(text, **fields))
        await settle(self.s)
        sent = self.channels[channel].sent
        return sent[-1].text if sent else ""

    async def records(self) -> dict[str, dict[str, Any]]:
        """Every conversation record (minus the transcript size bookkeeping)."""
        out = {}
        for rec in await self.s.index.all_records():
            row = dataclasses.asdict(rec)
            row.pop("indexed_bytes")
            out[rec.id] = row
        return out


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    config = telegram_config(tmp_path)
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    core = Core(services, brain)
    for channel in core.channels.values():
        await attach_channel(services, channel)
    try:
        yield core
    finally:
        await shutdown_services(services)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/new", ("new", "")),
        ("  /model   haiku ", ("model", "haiku")),
        ("/model@MyAgentBot opus", ("model", "opus")),
        ("/RENAME Garden plans", ("rename", "Garden plans")),
        ("/reply p1234567 see you\nat five", ("reply", "p1234567 see you\nat five")),
        ("/search\nboiler", ("search", "boiler")),
        ("hello /new", None),
        ("/", None),
        ("// comment", None),
        ("/ new", None),
        ("/путь", ("путь", "")),
        ("/model\u00a0haiku", ("model", "haiku")),
        ("/model\thaiku", ("model", "haiku")),
        ("/new\u00a0", ("new", "")),
        ("/\u00a0new", None),
    ],
)
def test_parse_command(text: str, parsed: tuple[str, str] | None) -> None:
    assert parse_command(text) == parsed


# -- /new ------------------------------------------------------------------------------
async def test_new_on_a_channel_unpins_and_pins_a_fresh_one(core: Core) -> None:
    await core.say("first topic: the boiler")
    await core.say("/model opus")
    old = (await core.s.conversations.list())[0]
    assert old.model == "opus" and old.pinned

    answer = await core.say("/new")
    assert "new conversation" in answer.lower() and "opus" in answer
    old_after = await core.s.index.get(old.id)
    assert old_after is not None
    assert old_after.pinned is False
    assert old_after.channel == "telegram"  # keeps its channel icon
    assert old_after.turn_count == 1
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None and fresh.id != old.id
    assert fresh.pinned and fresh.channel == "telegram"
    assert fresh.model == "opus"  # inherits the active model
    assert fresh.channel_meta.get("chatId") == old.channel_meta.get("chatId")

    await core.say("second topic: the garden")
    fresh = await core.s.index.get(fresh.id)
    assert fresh is not None and fresh.turn_count == 1
    assert core.brain.requests[-1].conversation_id == fresh.id
    assert core.brain.requests[-1].model_alias == "opus"
    old_after2 = await core.s.index.get(old.id)
    assert old_after2 is not None and old_after2.turn_count == 1
    # Exactly one pinned conversation for the owner on telegram.
    pinned = [r for r in await core.s.conversations.list() if r.pinned]
    assert [r.id for r in pinned] == [fresh.id]


async def test_new_commands_at_the_same_moment_leave_one_pinned_conversation(
    core: Core,
) -> None:
    # Regression (session 39): each /new had looked its conversation up before taking
    # the contact's lock; three at once each started a conversation, and the owner had
    # three pinned on telegram, two of them empty for good.
    import asyncio

    await core.say("the boiler again")
    before = {r.id for r in await core.s.conversations.list()}
    await asyncio.gather(*(core.s.router.deliver(inbound("/new")) for _ in range(3)))
    await settle(core.s)
    records = await core.s.conversations.list()
    pinned = [r for r in records if r.pinned]
    assert len(pinned) == 1 and len({r.id for r in records} - before) == 1
    answers = [m.text for m in core.telegram.sent if m.kind == "command"]
    assert sum(a.startswith("Started a new conversation") for a in answers) == 1
    assert sum(a.startswith("This conversation is new already") for a in answers) == 2


async def test_new_with_a_greeting_in_a_chat_starts_with_it(core: Core) -> None:
    # Regression (session 39): the filter for a mail's sign-off ran on every channel, so
    # "/new Ciao" or "/new cheers" on Telegram started an empty conversation.
    await core.say("the boiler again")
    await core.say("/new Ciao")
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None and fresh.turn_count == 1  # its first message, answered
    assert core.brain.requests[-1].text == "Ciao"


async def test_new_then_a_command_runs_it_in_the_fresh_conversation(core: Core) -> None:
    # Regression (session 39): "/new /model haiku" sent "/model haiku" to the model as
    # words (asked and paid to answer them), and the conversation stayed on sonnet.
    await core.say("the boiler again")
    asked = len(core.brain.requests)
    answer = await core.say("/new /model haiku")
    assert answer.startswith("Model switched to haiku"), answer
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None and fresh.model == "haiku" and fresh.turn_count == 0
    assert len(core.brain.requests) == asked


async def test_new_on_the_offline_brain_says_no_model_answers_yet(tmp_path: Path) -> None:
    # "(model sonnet)" read as if sonnet would answer, with no API key set.
    services = await open_services(telegram_config(tmp_path))
    core = Core(services, None)  # type: ignore[arg-type]
    for channel in core.channels.values():
        await attach_channel(services, channel)
    try:
        assert services.brain.name == "offline"
        await core.say("the boiler again")
        started = await core.say("/new")
        assert started.startswith(
            "Started a new conversation (model sonnet once an API key is set; until then "
            "replies are recall-only)."
        )
        again = await core.say("/new")
        assert "(model sonnet once an API key is set;" in again
        # Regression (session 39): /model said it as if the model named would answer.
        switched = await core.say("/model haiku")
        assert switched.endswith(
            "for this conversation. It answers once an API key is set; until then replies "
            "are recall-only."
        ), switched
        listed = await core.say("/model")
        assert listed.startswith("Current model: haiku (")
        assert listed.endswith("No API key is set: replies are recall-only, no model is asked.")
    finally:
        await shutdown_services(services)


async def test_new_on_the_web_creates_a_web_conversation(core: Core) -> None:
    await core.say("web hello", channel="web")
    first = await core.s.conversations.most_recent("web")
    assert first is not None and not first.pinned
    await core.say("/new", channel="web")
    second = await core.s.conversations.most_recent("web")
    assert second is not None and second.id != first.id
    assert second.channel == "web" and not second.pinned
    await core.say("web second", channel="web")
    assert core.brain.requests[-1].conversation_id == second.id
    assert [r.channel for r in await core.s.conversations.list()] == ["web", "web"]


async def test_new_typed_twice_keeps_the_empty_conversation_on_every_channel(
    core: Core,
) -> None:
    # Regression: on Telegram (and e-mail) "/new" typed in the conversation the last
    # "/new" had made, nothing said in it yet, made another and left the first in the
    # list, empty, for good; on every channel the answer said "Started a new
    # conversation ... The previous one stays searchable" when none was started.
    await core.say("the boiler again")
    first = await core.say("/new")
    assert first.startswith("Started a new conversation")
    fresh = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert fresh is not None
    before = {r.id for r in await core.s.conversations.list()}
    again = await core.say("/new")
    assert {r.id for r in await core.s.conversations.list()} == before
    pinned = await core.s.conversations.pinned_for(f"telegram:{OWNER}")
    assert pinned is not None and pinned.id == fresh.id
    assert again == (
        "This conversation is new already (model sonnet): nothing has been said in it yet."
    )
    # With a first message, that message starts it (no second conversation either).
    await core.say("/new the garden now")
    started = [m.text for m in core.telegram.sent if m.kind == "command"][-1]
    assert started == "This conversation is new already (model sonnet): your message starts it."
    assert {r.id for r in await core.s.conversations.list()} == before
    rec = await core.s.index.get(fresh.id)
    assert rec is not None and rec.turn_count == 1

    await core.say("web hello", channel="web")
    await core.say("/new", channel="web")
    assert await core.say("/new", channel="web") == again  # the same answer on the dashboard


async def test_web_message_into_a_pinned_channel_conversation_is_refused(core: Core) -> None:
    from bot.channel import DeliveryError

    await core.say("on telegram")
    rec = (await core.s.conversations.list())[0]
    with pytest.raises(DeliveryError):
        await core.s.router.deliver(
            inbound("from web", channel="web", sender="owner", conversation_id=rec.id)
        )
    with pytest.raises(DeliveryError):
        await core.s.router.deliver(
            inbound(
                "into the void",
                channel="web",
                sender="owner",
                conversation_id="conv-01HQXK5J7G8M3N4P5R6S7T8V9W",
            )
        )
    # Once unpinned by /new it can be continued from the dashboard.
    await core.say("/new")
    await core.say("continued on web", channel="web", conversation_id=rec.id)
    fresh = await core.s.index.get(rec.id)
    assert fresh is not None and fresh.turn_count == 2


# -- /model, /help, /status, /rename, /search, unknown ------------------------------------
async def test_model_shows_and_switches(core: Core) -> None:
    await core.say("hello")
    answer = await core.say("/model")
    assert "Current model: sonnet" in answer
    for alias in ("opus", "sonnet", "haiku"):
        assert alias in answer
    answer = await core.say("/model HAIKU")
    assert "haiku" in answer
    rec = (await core.s.conversations.list())[0]
    assert rec.model == "haiku"
    assert "Current model: haiku" in await core.say("/model")
    answer = await core.say("/model gpt-9")
    assert "Unknown model" in answer
    rec = (await core.s.conversations.list())[0]
    assert rec.model == "haiku"


async def test_model_by_the_id_it_shows_and_a_typo_gets_a_suggestion(core: Core) -> None:
    # Regression: /model shows "sonnet (claude-sonnet-4-6)"; the owner who typed that id
    # back was told "Unknown model", and a typo got no hint.
    await core.say("hello")
    model_id = core.s.config.resolve_model("haiku")
    answer = await core.say(f"/model {model_id.upper()}")
    assert answer == f"Model switched to haiku ({model_id}) for this conversation."
    assert (await core.s.conversations.list())[0].model == "haiku"
    answer = await core.say("/model opsu")
    assert answer.startswith("Unknown model 'opsu'. Did you mean opus? Available: ")
    assert "Did you mean" not in await core.say("/model gpt-9")
    assert (await core.s.conversations.list())[0].model == "haiku"


async def test_model_named_again_changes_nothing_and_says_so(core: Core) -> None:
    # Regression: "/model haiku" in a conversation on haiku wrote another "Model set to
    # haiku" note into the transcript (each shown in the chat) and said it switched.
    await core.say("hello")
    assert (await core.say("/model haiku")).startswith("Model switched to haiku")
    again = await core.say("/model HAIKU")
    assert again == "This conversation uses haiku (claude-haiku-4-5) already."
    rec = (await core.s.conversations.list())[0]
    notes = [
        line
        for line in core.s.conversations.read_lines(rec.id)
        if line.get("event") == "meta_update" and line.get("model")
    ]
    assert len(notes) == 1


async def test_model_with_words_after_the_name_answers_usage_on_every_channel(
    core: Core,
) -> None:
    # Regression: "/model haiku please" switched to haiku and dropped "please" without a
    # word, so the owner could not tell what was read.
    usage = "Usage: /model [opus|sonnet|haiku]: a model's name alone. Nothing was changed."
    await core.say("hello")
    assert await core.say("/model haiku please") == usage
    assert await core.say("/model gpt 9") == usage  # not "Unknown model 'gpt'"
    assert await core.say("/model haiku please", channel="web") == usage
    assert await core.say("/model opus now", channel="email", sender=OWNER_EMAIL) == usage
    assert {r.model for r in await core.s.conversations.list()} == {"sonnet"}


async def test_a_mail_command_reads_its_first_line_not_the_signature(core: Core) -> None:
    # Regression: the lines under a command in a mail (its signature) were read as more
    # words after the model's name (the usage answered, nothing switched) and as part of
    # a title.
    signed = "\n\nSent from my iPhone"
    answer = await core.say("/model haiku" + signed, channel="email", sender=OWNER_EMAIL)
    assert answer.startswith("Model switched to haiku"), answer
    answer = await core.say("/rename Trip to Rome" + signed, channel="email", sender=OWNER_EMAIL)
    assert answer == "Renamed to: Trip to Rome", answer


async def test_commands_never_reach_the_brain(core: Core) -> None:
    answers = {}
    for text in ("/help", "/status", "/model", "/rename Heating", "/search boiler", "/frobnicate"):
        answers[text] = await core.say(text)
    assert core.brain.requests == []
    assert "/new" in answers["/help"] and "/trust" in answers["/help"]
    assert "Brain: scripted" in answers["/status"]
    assert "Renamed to: Heating" in answers["/rename Heating"]
    assert "Unknown command /frobnicate" in answers["/frobnicate"]
    assert "/help" in answers["/frobnicate"]
    assert all(m.kind == "command" for m in core.telegram.sent)
    # Commands are recorded as events, not turns.
    rec = (await core.s.conversations.list())[0]
    lines = core.s.store.read_lines(rec.id)
    assert not [line for line in lines if line["type"] == "turn"]
    assert [line["command"] for line in lines if line.get("event") == "command"] == [
        "/help",
        "/status",
        "/model",
        "/rename",
        "/search",
        "/frobnicate",
    ]


async def test_status_names_the_conversation_by_title_and_links_it_on_the_web(
    core: Core,
) -> None:
    # Regression: on the web, /status read "Conversation: Heating (conv-01…)": an
    # internal id where the dashboard can link the conversation by its title.
    await core.say("web hello", channel="web")
    rec = await core.s.conversations.most_recent("web")
    assert rec is not None
    await core.say("/rename Heating", channel="web")
    text = await core.say("/status", channel="web", conversation_id=rec.id)
    assert "Conversation: Heating" in text and rec.id not in text
    lines = core.channels["web"].sent[-1].metadata["statusLines"]
    assert {"prefix": "Conversation: ", "conversationId": rec.id, "title": "Heating"} in lines
    assert [line for line in lines if isinstance(line, str)] == [
        line for line in text.splitlines() if not line.startswith("Conversation: ")
    ]
    # Telegram cannot link: the id stays, what `my-agent conversations show` takes.
    await core.say("phone hello")
    phone = await core.say("/status")
    phone_rec = await core.s.conversations.most_recent("telegram")
    assert phone_rec is not None
    named = (await shown_names(core.s, [phone_rec]))[phone_rec.id]
    assert named.endswith("New conversation")
    assert f"Conversation: {named} ({phone_rec.id})" in phone
    assert "statusLines" not in core.telegram.sent[-1].metadata


async def test_status_names_a_mail_thread_as_the_dashboard_and_the_cli_do(
    tmp_path: Path,
) -> None:
    # Regression (session 42): off the web, /status named the conversation by its bare
    # title and id, "New conversation (conv-…)" for every unnamed mail thread, where the
    # dashboard and `my-agent conversations` (since session 41) give its sender and
    # subject: "owner@example.org — Garden · New conversation".
    config = telegram_config(tmp_path)
    services = await open_services(config)
    core = Core(services, ScriptedBrain())
    for channel in core.channels.values():
        await attach_channel(services, channel)
    try:
        await core.say("garden plans", channel="email", sender=OWNER_EMAIL, subject="Garden")
        answer = await core.say(
            "/status", channel="email", sender=OWNER_EMAIL, subject="Re: Garden"
        )
        rec = await core.s.conversations.most_recent("email")
        assert rec is not None
        named = (await shown_names(core.s, [rec]))[rec.id]
    finally:
        await shutdown_services(services)
    assert "Garden" in named and named.endswith(" · New conversation")
    assert answer.splitlines()[0] == f"Conversation: {named} ({rec.id})"


async def test_status_tells_the_conversation_brain_and_health_on_every_channel(
    tmp_path: Path,
) -> None:
    # Regression: on Telegram and e-mail /status gave the conversation's title and id,
    # its model and cost, and the counts: not when it started or was last active (in the
    # owner's time zone), nor whether it is pinned, nor the channels' and storage's state.
    config = telegram_config(tmp_path, owner={"timezone": "Asia/Tokyo"})
    services = await open_services(config)  # the offline brain
    core = Core(services, ScriptedBrain())
    for channel in core.channels.values():
        await attach_channel(services, channel)
    try:
        await core.say("the boiler again")
        rec = (await core.s.conversations.list())[0]
        answers = {"telegram": await core.say("/status")}
        await core.say("garden plans", channel="email", sender=OWNER_EMAIL, subject="Garden")
        answers["email"] = await core.say(
            "/status", channel="email", sender=OWNER_EMAIL, subject="Re: Garden"
        )
    finally:
        await shutdown_services(services)
    phone = answers["telegram"].splitlines()
    assert phone[0].startswith("Conversation: ") and phone[0].endswith(f"({rec.id})")
    assert phone[1] == "Model: sonnet · 1 turn · pinned (new messages here continue it)"
    started = local_minute(rec.created, ZoneInfo("Asia/Tokyo"))
    assert phone[2].startswith(f"Started {started}, last active ")
    assert phone[2].endswith("(Asia/Tokyo)")
    assert "Brain: offline (no API key: replies are recall-only" in answers["telegram"]
    assert "Daemon: channels up: " in answers["telegram"] and "storage ok" in answers["telegram"]
    assert "Conversations: 1; outbox pending: 0" in answers["telegram"]
    mail = answers["email"].splitlines()
    assert mail[0].startswith("Conversation: ") and mail[0].endswith(")")
    assert mail[1].startswith("Model: sonnet · ") and mail[2].startswith("Started ")
    assert "Daemon: " in answers["email"] and "Conversations: 2;" in answers["email"]


async def test_status_names_an_older_escalation_conversation_as_the_dashboard_does(
    core: Core,
) -> None:
    # As an older version left it: the party wrote with no name, and the owner's
    # conversation their escalation opened is titled by their bare id.
    party, _ = await core.s.external.record_inbound(
        "telegram", "8081", display_name=None, chat_id="8081", text="hi", message_ref="o-1"
    )
    old = await core.s.conversations.create(
        "telegram",
        identity_key=f"telegram:{OWNER}",
        pinned=True,
        participants=[OWNER],
        channel_meta={"chatId": OWNER},
        reason="escalation",
    )
    await core.s.conversations.append_event(old.id, "escalation", partyId=party.id, text="hi")
    await core.s.conversations.set_title_topics(old.id, "Escalation: 8081 (telegram)", [], 0)
    await core.s.external.record_inbound(  # their name is known since
        "telegram", "8081", display_name="Eve", chat_id="8081", text="?", message_ref="o-2"
    )
    text = await core.say("/status")
    # Before, only the dashboard derived it: "Conversation: Escalation: 8081 (telegram)".
    assert f"Conversation: Escalation: Eve (telegram) ({old.id})" in text
    # derived when read: the stored title is as it was
    assert (await core.s.conversations.require(old.id)).title == "Escalation: 8081 (telegram)"


async def test_rename_is_manual_and_protected(core: Core) -> None:
    await core.say("hi")
    await core.say("/rename   Tax   return 2026 ")
    rec = (await core.s.conversations.list())[0]
    assert rec.title == "Tax return 2026" and rec.manually_named
    await core.s.conversations.set_title_topics(rec.id, "auto-title", ["taxes"], 5)
    rec = (await core.s.conversations.list())[0]
    assert rec.title == "Tax return 2026" and rec.topics == ["taxes"]
    assert "Usage" in await core.say("/rename")


async def test_a_long_rename_ends_at_a_word_and_says_it_was_shortened(core: Core) -> None:
    """Regression: a title over 80 characters was cut mid-word ("...and a very long ti")
    and answered "Renamed to: ..." as if kept whole."""
    await core.say("hi")
    long = "Lisbon trip budget planning for March with family and friends and a very long title"
    answer = await core.say(f"/rename {long} that goes on and on")
    rec = (await core.s.conversations.list())[0]
    assert rec.title == long[: long.rindex(" ")] + "…"
    assert answer == f"Renamed to: {rec.title} (titles are kept to 80 characters)"
    assert await core.say("/rename Lisbon") == "Renamed to: Lisbon"


async def test_rename_and_naming_keep_no_control_characters(core: Core) -> None:
    """Regression: /rename and the automatic naming stored NUL, ESC and C1 controls in a
    title (shown on a phone, in the dashboard and the CLI, and written to the log)."""
    await core.say("hi")
    answer = await core.say("/rename Tax\x00return\x1b[2J 2026\x9b")
    rec = (await core.s.conversations.list())[0]
    assert rec.title == "Tax return [2J 2026"
    # not "kept to 80 characters": nothing was cut
    assert answer == "Renamed to: Tax return [2J 2026"
    auto = await core.s.conversations.create("web")
    await core.s.conversations.set_title_topics(auto.id, "Garden\x00\x1bNotes\x07", [], 5)
    assert (await core.s.conversations.require(auto.id)).title == "Garden Notes"


@pytest.mark.parametrize("invisible", ["\ufeff", "\u200b\u200b", "\u202e\u202c", " \u2060 "])
async def test_a_title_of_invisible_characters_is_no_title(core: Core, invisible: str) -> None:
    """Regression: a zero-width space, a BOM or bidi marks alone were kept as a blank
    title ("Renamed to: "), marked as the owner's, so automatic naming never named the
    conversation again."""
    await core.say("hi")
    assert await core.say(f"/rename {invisible}") == "Usage: /rename <title>"
    rec = (await core.s.conversations.list())[0]
    assert rec.title is None and not rec.manually_named
    # an emoji joined by a zero-width joiner is a title
    answer = await core.say("/rename Family \U0001f468\u200d\U0001f469\u200d\U0001f467")
    assert answer == "Renamed to: Family \U0001f468\u200d\U0001f469\u200d\U0001f467"


async def test_help_says_new_takes_a_first_message(core: Core) -> None:
    """Regression: /help listed "/new - start a fresh conversation" alone, though README
    documents ``/new [first message]`` (that message starts the new conversation)."""
    assert "/new [first message] - " in await core.say("/help")


async def test_search_command_finds_past_conversations(core: Core) -> None:
    await core.say("the heat pump makes a rattling noise", channel="web")
    await core.say("/new", channel="web")
    answer = await core.say("/search rattling heat pump")
    web = [r for r in await core.s.conversations.list() if r.channel == "web"]
    old = next(r for r in web if r.turn_count == 1)
    assert "Results for" in answer and old.id in answer
    assert "No conversations match" in await core.say("/search xylophone")


async def test_search_command_links_open_at_the_turn_the_snippet_shows(core: Core) -> None:
    # Regression: a result's link opened the conversation around its first matched turn
    # while its snippet quoted the best one, which could be hundreds of turns later.
    await core.say("in passing, a word on the zeppelin and many other things besides")
    await core.say("small talk")
    await core.say("the zeppelin hangar: zeppelin repairs, zeppelin fuel")
    await core.say("/search zeppelin")
    (found,) = core.channels["telegram"].sent[-1].metadata["results"]
    assert "zeppelin repairs" in found["snippet"]
    assert found["focusTurn"] == 3


async def test_search_command_names_conversations_as_the_dashboard_lists_them(
    core: Core,
) -> None:
    # Regression: an untitled conversation was listed as "Untitled" (the sidebar says
    # "New conversation", after the contact for a channel one), and the dashboard got
    # only this text, with ids it could not open.
    await core.say("the heat pump makes a rattling noise", sender_name="Hanan")
    answer = await core.say("/search rattling heat pump")
    (conv,) = [r for r in await core.s.conversations.list() if r.channel == "telegram"]
    assert "Untitled" not in answer
    assert "1. Hanan · New conversation [telegram" in answer and conv.id in answer
    sent = core.channels["telegram"].sent[-1]
    (found,) = sent.metadata["results"]
    assert sent.metadata["heading"] == answer.splitlines()[0]
    assert found["conversationId"] == conv.id and found["title"] == "Hanan · New conversation"
    assert found["focusTurn"] == 1 and found["channel"] == "telegram"
    await core.s.conversations.rename(conv.id, "Heat pump noise")
    answer = await core.say("/search rattling heat pump")
    assert "1. Hanan · Heat pump noise [telegram" in answer


async def test_search_command_dates_results_by_the_owners_calendar(core: Core) -> None:
    # Regression: /search dated results by their UTC day while the recall tool and the
    # offline brain use the owner's: in New York an evening conversation (20:30, the
    # next day in UTC) showed as the day after, and disagreed with the assistant.
    core.s.config.owner.timezone = "America/New_York"
    manager = core.s.conversations
    evening = await manager.create("web")  # in the future: it stays the last update
    await manager.append_turn(
        evening.id, "user", "kayak rental by the lake", timestamp="2999-03-02T01:30:00.000Z"
    )
    answer = await core.say("/search kayak rental")
    assert evening.id in answer
    assert "[web, 2999-03-01, " in answer and "2999-03-02" not in answer


# -- /trust, /block, /reply ---------------------------------------------------------------
async def _stranger(core: Core, sender: str = "777", text: str = "hello, it's Alice") -> Any:
    await core.say(text, sender=sender, sender_name="Alice")
    party = await core.s.external.find(sender)
    assert party is not None
    return party


async def test_trust_makes_a_party_known_and_answered(core: Core) -> None:
    party = await _stranger(core)
    assert len(await core.s.external.pending_escalations()) == 1
    assert "escalations pending: 1" in await core.say("/status")
    answer = await core.say(f"/trust {party.id}")
    assert "now known" in answer
    assert (await core.s.external.get(party.id)).tier == "known"  # type: ignore[union-attr]
    assert await core.s.external.pending_escalations() == []
    await core.say("can you tell me the opening hours?", sender="777")
    assert core.brain.requests[-1].profile == "restricted"
    assert core.telegram.sent[-1].text == "re: can you tell me the opening hours?"
    assert core.telegram.sent[-1].chat_id == "777"
    # /trust <party> untrusted puts them back.
    await core.say("/trust 777 untrusted")
    assert (await core.s.external.get(party.id)).tier == "untrusted"  # type: ignore[union-attr]


async def test_an_answer_going_to_a_reply_to_address_is_said_so(core: Core) -> None:
    # Regression: "From: Your Bank" asking for answers at an attacker's address: the
    # escalation did not say so, and the owner's /reply was confirmed "Sent to Your Bank"
    # while it went to the attacker's address (as Reply-To asks every mail client).
    await core.say(
        "Please confirm your account number",
        channel="email",
        sender="support@bank.example",
        chat="support@bank.example",
        sender_name="Your Bank",
        metadata={"reply_to": ["Collect@Attacker.example"]},
    )
    bank = await core.s.external.find("support@bank.example")
    assert bank is not None
    (escalation,) = await core.s.external.pending_escalations()
    assert "asks for answers at collect@attacker.example, not the" in escalation["text"]
    answer = await core.say(f"/reply {bank.id} no thanks")
    assert answer == (
        "Sent to Your Bank <support@bank.example> (email) at collect@attacker.example, "
        "the address their message asked for."
    )
    # an answer to the address it came from says nothing more
    await core.say("hello", channel="email", sender="ann@else.example", chat="ann@else.example")
    ann = await core.s.external.find("ann@else.example")
    assert ann is not None
    assert await core.say(f"/reply {ann.id} hi") == f"Sent to {ann.label}."


async def test_the_owners_reply_goes_to_the_party_alone_and_says_so(core: Core) -> None:
    # Regression (session 40): with reply_all, the owner's /reply to a stranger's mail
    # went to everyone the stranger put in To and Cc (a journalist in Cc), while the
    # confirmation named the stranger alone.
    await core.say(
        "Is Robin free next week?",
        channel="email",
        sender="eve@stranger.example",
        chat="eve@stranger.example",
        sender_name="Eve",
        message_ref="<q1@stranger.example>",
        metadata={
            "to": ["assistant@bot.example"],
            "cc": ["Dan@Press.example"],
            "readers": ["Dan@Press.example"],
        },
    )
    eve = await core.s.external.find("eve@stranger.example")
    assert eve is not None
    answer = await core.say(f"/reply {eve.id} I'm off sick all week")
    assert answer == (
        f"Sent to {eve.label} alone, not to dan@press.example, to whom their message also went."
    )
    (sent,) = [m for m in core.channels["email"].sent if m.kind == "reply"]
    assert sent.metadata[TO_PARTY_ALONE] is True  # the e-mail channel answers Eve alone
    assert sent.metadata["cc"] == ["Dan@Press.example"]  # (what it knows of the mail)


async def _eve_wrote(core: Core, n: int, to: list[str], cc: list[str]) -> Any:
    await core.say(
        f"Is Robin free next week? ({n})",
        channel="email",
        sender="eve@stranger.example",
        chat="eve@stranger.example",
        sender_name="Eve",
        message_ref=f"<q{n}@stranger.example>",
        metadata={"to": to, "cc": cc},
    )
    eve = await core.s.external.find("eve@stranger.example")
    assert eve is not None
    return eve


async def test_replyall_answers_the_party_and_everyone_else_on_their_mail(core: Core) -> None:
    # Regression (session 41): since session 40 the owner's words went to the party
    # alone, and nothing could answer everyone their mail went to.
    core.s.config.channels.email.address = "assistant@bot.example"
    eve = await _eve_wrote(
        core,
        1,
        to=["Assistant@Bot.example", "carol@x.example"],
        cc=["Dan@Press.example", "CAROL@x.example", "eve@stranger.example"],
    )
    answer = await core.say(f"/replyall {eve.id} I'm off sick all week", message_id="ra-1")
    assert answer == (
        f"Sent to {eve.label} and to everyone else their message went to: "
        "carol@x.example, dan@press.example."
    )
    (sent,) = [m for m in core.channels["email"].sent if m.kind == "reply"]
    # the e-mail channel answers them all (its rule: tests/channels/email)
    assert sent.metadata[TO_ALL] is True and TO_PARTY_ALONE not in sent.metadata
    assert sent.in_reply_to == "<q1@stranger.example>"
    rows = await core.s.state.fetchall("SELECT dedup_key FROM outbox WHERE dedup_key LIKE '%party'")
    assert [key for (key,) in rows] == ["telegram:ra-1:to-party"]  # as /reply's: queued once
    assert "/replyall <party> <text>" in await core.say("/help")
    assert await core.say("/replyall") == "Usage: /replyall <party> <text>"


async def test_replyall_on_a_mail_we_were_blind_copied_on_goes_to_the_party_alone(
    core: Core,
) -> None:
    core.s.config.channels.email.address = "assistant@bot.example"
    eve = await _eve_wrote(core, 2, to=["carol@x.example"], cc=[])
    answer = await core.say(f"/replyall {eve.id} Not now")
    assert answer == (
        f"Sent to {eve.label} alone, not to carol@x.example: I was only blind-copied on "
        "their message, and a reply to all would show them that you had it."
    )
    eve = await _eve_wrote(core, 3, to=["assistant@bot.example"], cc=[])
    answer = await core.say(f"/replyall {eve.id} Not now")
    assert answer == f"Sent to {eve.label}: their message went to no one else."


async def test_the_escalation_of_a_mail_to_others_too_names_replyall(core: Core) -> None:
    # Regression (session 41): the escalation of a stranger's mail that went to others
    # too named /reply only (which answers them alone), not /replyall.
    core.s.config.channels.email.address = "assistant@bot.example"
    eve = await _eve_wrote(
        core, 4, to=["Assistant@Bot.example"], cc=["Dan@Press.example", "eve@stranger.example"]
    )
    (escalation,) = await core.s.external.pending_escalations()
    assert escalation["text"].endswith(
        f"/reply {eve.id} <text> to answer yourself (them alone), /replyall {eve.id} <text> "
        "to answer them and everyone else their message went to (dan@press.example)."
    )
    # Blind-copied (/replyall answers them alone), or to us alone: /reply only.
    for sender, to in (
        ("fay@x.example", "carol@x.example"),
        ("gil@x.example", "assistant@bot.example"),
    ):
        await core.say("Hi", channel="email", sender=sender, chat=sender, metadata={"to": [to]})
        party = await core.s.external.find(sender)
        assert party is not None
        (escalation,) = [
            e for e in await core.s.external.pending_escalations() if e["partyId"] == party.id
        ]
        assert escalation["text"].endswith(f"/reply {party.id} <text> to answer yourself.")
        assert "/replyall" not in escalation["text"]


async def test_the_owners_notices_about_a_mail_to_others_too_name_replyall(core: Core) -> None:
    # Regression (session 42): since session 41 an escalation named /replyall for a mail
    # that went to others too, but the notice of its edit and the hourly budget's named
    # /reply only, and Telegram's buttons had Reply and no Reply all.
    core.s.config.channels.email.address = "assistant@bot.example"
    mail = {"to": ["assistant@bot.example"], "cc": ["Dan@Press.example"]}
    eve_said = {
        "channel": "email",
        "sender": "eve@stranger.example",
        "chat": "eve@stranger.example",
    }
    await core.say("Is Robin free on Monday?", message_id="e1", metadata=mail, **eve_said)
    eve = await core.s.external.find("eve@stranger.example")
    assert eve is not None
    to_all = (
        "/replyall {id} <text> to answer them and everyone else their message went to "
        "(dan@press.example)."
    )
    reply_all = ("Reply", f"/reply {eve.id}"), ("Reply all", f"/replyall {eve.id}")
    (escalation,) = [m for m in core.telegram.sent if m.kind == "escalation"]
    assert escalation.text.endswith(to_all.format(id=eve.id))
    assert escalation.actions[-2:] == reply_all
    # her edit of the message escalated: the owner's notice
    edit = {**mail, "edited": True, "original_message_id": "e1", "new_text": "on Tuesday?"}
    await core.say("[edited] on Tuesday?", message_id="e1:edit", metadata=edit, **eve_said)
    (notice,) = [m for m in core.telegram.sent if m.kind == "escalation"][1:]
    assert "changed their message" in notice.text
    assert notice.text.endswith(to_all.format(id=eve.id)) and notice.actions == reply_all
    # a known contact's hourly budget spent: the owner's notice
    core.s.config.trust.contacts = {"email": {"kim@x.example": "known"}}
    core.s.config.trust.known_replies_per_hour = 0
    kim_said = {"channel": "email", "sender": "kim@x.example", "chat": "kim@x.example"}
    await core.say("Lunch on Friday?", metadata=mail, **kim_said)
    kim = await core.s.external.find("kim@x.example")
    assert kim is not None and kim.tier == "known"
    (spent,) = [m.text for m in core.telegram.sent if "known_replies_per_hour" in m.text]
    assert spent.endswith(to_all.format(id=kim.id))


async def test_block_silences_a_party(core: Core) -> None:
    party = await _stranger(core)
    assert "blocked" in await core.say(f"/block {party.id}")
    before = len(core.telegram.sent)
    await core.say("hello again??", sender="777")
    assert len(core.telegram.sent) == before
    refreshed = await core.s.external.get(party.id)
    assert refreshed is not None and refreshed.tier == "blocked"
    assert refreshed.message_count == 2


async def test_reply_says_which_files_could_not_go_to_the_party_and_why(core: Core) -> None:
    await core.say("Hi", channel="email", sender="bob@else.example.com",
                   chat="bob@else.example.com", message_ref="<b1@else.example.com>")  # fmt: skip
    bob = await core.s.external.find("bob@else.example.com")
    alice = await _stranger(core)
    assert bob is not None
    photo = Attachment("photo", None, "image/jpeg", 10, "9x9", ref="tg-file-1")
    # A Telegram photo cannot go by e-mail (never downloaded): the words go, and why
    # the photo did not is said.
    answer = await core.say(f"/reply {bob.id} the plan", attachments=(photo,))
    assert answer.endswith(
        "Your photo was not passed on: files go on only from Telegram to Telegram, "
        "as I never download them."
    )
    assert core.channels["email"].sent[-1].text == "the plan"
    assert "files" not in core.channels["email"].sent[-1].metadata
    # To a Telegram party it goes on by its file_id, after the words.
    answer = await core.say(f"/reply {alice.id} the plan", attachments=(photo,))
    assert answer == "Sent to Alice (telegram): your words and photo."
    to_alice = core.telegram.sent[-2]  # then the owner's answer
    assert to_alice.chat_id == "777" and to_alice.text == "the plan"
    assert to_alice.metadata["files"] == [{"kind": "photo", "ref": "tg-file-1", "name": None}]
    said = await core.s.external.messages(alice.id)
    assert said[-1]["content"] == "the plan [photo]"  # what the party got, as recorded


async def test_reply_sends_to_the_party_on_its_channel(core: Core) -> None:
    await core.say(
        "Hello, is Robin available?",
        channel="email",
        sender="Bob <bob@else.example.com>",
        chat="bob@else.example.com",
        subject="Meeting",
        message_ref="<m1@else.example.com>",
    )
    party = await core.s.external.find("bob@else.example.com")
    assert party is not None and party.channel == "email"
    answer = await core.say(f"/reply {party.id} Robin will call you tomorrow.\nBest")
    assert "Sent to" in answer
    to_bob = core.channels["email"].sent[-1]
    assert to_bob.chat_id == "bob@else.example.com"
    assert to_bob.text == "Robin will call you tomorrow.\nBest"
    # In Bob's thread (regression: a new mail "Message from Assistant" without
    # In-Reply-To, unrelated to what Bob wrote, in his mail client).
    assert to_bob.in_reply_to == "<m1@else.example.com>" and to_bob.subject == "Meeting"
    msgs = await core.s.external.messages(party.id)
    assert msgs[-1]["direction"] == "out" and msgs[-1]["content"] == to_bob.text
    assert await core.s.external.pending_escalations() == []
    assert "Usage" in await core.say(f"/reply {party.id}")
    # Someone unknown is named as such (it used to be the usage line, as if the syntax
    # were wrong), for each of the three commands.
    for text in ("/reply nobody-like-this hi", "/trust pdeadbee", "/block nobody@nowhere.test"):
        answer = await core.say(text)
        assert "No one who wrote to me is known as" in answer and "Usage" not in answer
    assert "Usage" in await core.say("/trust")


# -- strangers' commands ------------------------------------------------------------------
async def test_strangers_commands_never_touch_owner_records(core: Core) -> None:
    await core.say("owner's private note about the safe code")
    await core.say("/model haiku")
    victim = await _stranger(core, sender="666")
    # each of them answered here (at most one an interval otherwise: tests/
    # test_escalation_flood.py)
    core.s.config.trust.escalation_interval_seconds = 0
    owner_before = await core.records()
    parties_before = {p.id: p.to_dict() for p in await core.s.external.list_parties()}

    answers = {}
    for text in ("/new", "/model opus", f"/trust {victim.id}", "/trust 666", "/block 424242",
                 f"/reply {victim.id} hi", "/rename pwned", "/search safe code", "/status",
                 "/help", "/bogus"):  # fmt: skip
        await core.say(text, sender="666")
        answers[text] = core.telegram.sent[-1]
        assert answers[text].chat_id == "666"

    assert await core.records() == owner_before
    parties_after = {p.id: p.to_dict() for p in await core.s.external.list_parties()}
    assert {k: v["tier"] for k, v in parties_after.items()} == {
        k: v["tier"] for k, v in parties_before.items()
    }
    assert "not available" in answers["/model opus"].text
    assert "not available" in answers["/search safe code"].text
    assert "safe code" not in answers["/search safe code"].text.replace("/search safe code", "")
    assert "/trust" not in answers["/help"].text
    assert "Started over" in answers["/new"].text
    assert core.brain.requests[-1].profile == "owner"  # nothing went to the brain for them


async def test_a_party_is_named_by_their_telegram_handle(core: Core) -> None:
    # Regression: "/trust @eve" answered with the usage line (the party's key is the
    # numeric id and the @username was not kept), though the help offers handles.
    await core.say("hi, Eve here", sender="2002", sender_name="Eve", sender_aliases=("@Eve",))
    party = await core.s.external.find("2002")
    assert party is not None
    assert "now known" in await core.say("/trust @eve")
    assert (await core.s.external.get(party.id)).tier == "known"
    # a handle changed since: the newest one names them
    await core.say("new name", sender="2002", sender_name="Eve", sender_aliases=("@eve_2",))
    assert "blocked" in await core.say("/block @eve_2")


async def test_a_party_is_named_by_a_display_name_of_several_words(core: Core) -> None:
    # Regression (session 40): only the first word after /reply was a name: "Zed Smith"
    # could not be named, and with a party called "Zed" too, "/reply Zed Smith hi"
    # sent "Smith hi" to Zed.
    await core.say("hi, Zed Smith here", sender="3003", sender_name="Zed Smith")
    answer = await core.say("/reply Zed Smith  see you at 5")
    assert "Sent to" in answer, answer
    assert [m.text for m in core.telegram.sent if m.chat_id == "3003"][-1] == "see you at 5"
    await core.say("and I am Zed", sender="3004", sender_name="Zed")
    sent = len(core.telegram.sent)
    answer = await core.say("/reply Zed Smith hi")
    assert "More than one who wrote to me is called 'Zed' or 'Zed Smith'" in answer, answer
    assert "nothing was done" in answer
    assert len(core.telegram.sent) == sent + 1  # the answer to the owner only
    zed = await core.s.external.find("3004")
    assert zed is not None and zed.id in answer
    # where what follows a name cannot be the rest of the command, the name is clear
    assert "now known" in await core.say("/trust Zed Smith known")
    smith = await core.s.external.find("3003")
    assert smith is not None and smith.tier == "known"
    assert "blocked" in await core.say("/block Zed Smith")
    assert (await core.s.external.get(zed.id)).tier == "untrusted"  # type: ignore[union-attr]
    assert (await core.s.external.get(smith.id)).tier == "blocked"  # type: ignore[union-attr]


async def test_a_strangers_start_reaches_the_owner(core: Core) -> None:
    # Regression: Telegram makes "/start" every new user's first message; it got
    # "Unknown command /start" and the owner never heard of them.
    party = await _stranger(core, sender="5005", text="/start")
    to_them = [m.text for m in core.telegram.sent if m.chat_id == "5005"]
    assert len(to_them) == 1 and "passed on" in to_them[0]  # the acknowledgement
    escalations = await core.s.external.pending_escalations()
    assert [e["partyId"] for e in escalations] == [party.id]
    assert "/start" in escalations[0]["text"]


async def test_non_owner_in_a_group_cannot_use_owner_commands(core: Core) -> None:
    """A group conversation belongs to the owner: other members' commands may not switch
    it, change its model, rename it or search the owner's conversations."""
    await core.say("owner in the family group", group_id="-100", chat="-100")
    await core.say("owner's secret holiday plans for Lisbon")
    group_before = await core.records()
    for text in ("/new", "/model opus", "/rename mine now", "/search Lisbon", "/trust 1"):
        await core.say(text, sender="31337", group_id="-100", chat="-100")
        sent = core.telegram.sent[-1]
        assert sent.chat_id == "-100"
        assert "Results for" not in sent.text and "secret" not in sent.text
    assert await core.records() == group_before
    assert "/trust" not in await core.say("/help", sender="31337", group_id="-100", chat="-100")


async def test_group_replies_tell_the_owner_from_others_by_id_not_display_name(
    core: Core,
) -> None:
    # Regression: the reply engine matched the sender's display name (Telegram's
    # full_name) against the owner identities. The owner, who has a name, got the
    # restricted profile in their own group; a member who named themselves after the
    # owner's @username (or numeric id) got the owner profile: recall tools and the
    # owner's working context, in a group.
    group = {"group_id": "-100", "chat": "-100"}
    await core.say("hello group", sender_name="Robin Example", **group)
    assert core.brain.requests[-1].profile == "owner"
    for impostor in (OWNER_TELEGRAM_USER, OWNER):
        await core.say("what did the owner plan?", sender="31337", sender_name=impostor, **group)
        request = core.brain.requests[-1]
        assert request.profile == "restricted" and request.conversation_id is None
    # the owner's id counts (their @username alone not, with the id configured: a
    # username can be taken over; tests/test_router.py)
    await core.say("and me again", sender="424242", sender_aliases=(OWNER_TELEGRAM_USER,), **group)
    assert core.brain.requests[-1].profile == "owner"
    await core.say("me too", sender="999", sender_aliases=(OWNER_TELEGRAM_USER,), **group)
    assert core.brain.requests[-1].profile == "restricted"


async def test_a_resumed_group_reply_keeps_the_senders_standing(core: Core) -> None:
    group = {"group_id": "-100", "chat": "-100"}
    await core.say("hello group", sender_name="Robin Example", **group)
    conv = core.brain.requests[-1].conversation_id
    assert conv is not None
    # A member's message whose reply was pending at a crash, named after the owner.
    _, line = await core.s.conversations.append_turn(
        conv, "user", "list the owner's trips", sender=OWNER_TELEGRAM_USER, fromOwner=False
    )
    assert core.s.recovery is not None
    core.s.recovery.pending_replies = [(conv, line["turnNumber"])]
    await resume_pending_replies(core.s)
    await settle(core.s)
    assert core.brain.requests[-1].text == "list the owner's trips"
    assert core.brain.requests[-1].profile == "restricted"


async def test_a_members_reply_leaves_the_owners_notes_for_the_owner(core: Core) -> None:
    # Regression: a note for the owner's next reply (the offer to split the conversation)
    # was taken by whichever reply came next; a member's restricted reply never shows it,
    # so in a group it was lost.
    group = {"group_id": "-100", "chat": "-100"}
    await core.say("hello group", **group)
    conv = core.brain.requests[-1].conversation_id
    assert conv is not None
    core.s.conversations.add_note(conv, "offer to split the conversation")
    await core.say("hi bot", sender="31337", sender_name="Mallory", **group)
    assert core.brain.requests[-1].profile == "restricted"
    assert core.brain.requests[-1].notes == ()
    await core.say("and now?", **group)
    assert core.brain.requests[-1].notes == ("offer to split the conversation",)


async def test_search_command_says_when_more_conversations_matched(core: Core) -> None:
    # Regression: /search listed five results and nothing else: with more found, the
    # owner took those five for every conversation that matched.
    for i in range(7):
        await core.say(f"the boiler pressure dropped, note {i}", channel="web")
        await core.say("/new", channel="web")
    answer = await core.say("/search boiler pressure")
    assert answer.splitlines()[-1] == (
        "5 of 7 matches shown; add words or a filter (channel:, from:, to:) to narrow it down."
    )
    await core.say("the kayak is in the boathouse", channel="web")
    assert "shown" not in await core.say("/search kayak boathouse")


def test_the_rename_title_is_cut_between_characters() -> None:
    # Regression: /rename's title (matched against the stored one on a resumed run) was
    # cut at 80 code points, inside a skin-toned emoji.
    from bot.commands import rename_answer

    assert rename_answer("b" * 78 + "\U0001f44d\U0001f3fd" + "c")[1] == "b" * 78 + "…"


async def test_a_right_to_left_title_is_isolated_in_the_answer(core: Core) -> None:
    # Regression: "Renamed to: שלום 2" put the number before the Hebrew word; the title
    # is isolated from our words around it now.
    answer = await core.say("/rename שלום 2")
    assert "Renamed to: \u2068שלום 2\u2069" in answer


async def test_search_results_cut_their_snippet_between_characters(core: Core) -> None:
    # Regression: /search cut each snippet at 160 code points, here inside a family emoji.
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    rec = await core.s.conversations.create("web")
    await core.s.conversations.append_turn(rec.id, "user", "boiler " + "z" * 150 + family * 20)
    answer = await core.say("/search boiler")
    assert "boiler " + "z" * 150 + f" ({rec.id})" in answer
