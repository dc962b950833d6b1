"""Naming: turn 5 exactly once, re-naming on idle, manual titles win, suggestSplit,
channel-aware and offline titles, defensive parsing of the model's JSON."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from bot.brain.base import RequestRefused
from bot.index import ConversationRecord
from bot.lifecycle import Lifecycle, ManualClock
from bot.lifecycle.naming import (
    Namer,
    clean_subject,
    clean_title,
    clean_topics,
    contact_name,
    kebab,
    parse_naming,
    title_case,
)
from bot.lifecycle.prompts import NAMING_SYSTEM

from .conftest import Core, MakeLifecycle, ScriptedModel, unavailable


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


async def _user_turns(core: Core, conv_id: str, count: int, text: str = "the NAS backup") -> None:
    for _ in range(count):
        rec = await core.manager.require(conv_id)
        n = rec.turn_count + 1
        await core.manager.append_turn(conv_id, "user", f"Message {n} about {text}")
        await core.manager.append_turn(conv_id, "assistant", f"Reply {n} about {text}")


async def _named_in_an_outage(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> tuple[Lifecycle, str]:
    """A lifecycle whose naming model is down, and a conversation it named at its 5th
    user message (with the offline keyword title)."""
    model.naming = unavailable()
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5, text="kitchen renovation budget")
    await lifecycle.settle()
    return lifecycle, conv


async def test_named_after_the_fifth_user_message_exactly_once(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 4)
    await lifecycle.settle()
    assert model.count("naming") == 0 and (await core.row(conv)).title is None
    await core.manager.append_turn(conv, "user", "Message 5 about the NAS backup")
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title == "NAS Backup Plan"
    assert row.topics == ["nas-backup", "storage"]
    assert row.last_named_turn == 5
    (event,) = core.events(conv, "title_assigned")
    assert event["title"] == "NAS Backup Plan" and event["throughTurn"] == 5
    await core.manager.append_turn(conv, "assistant", "Reply 5")
    await _user_turns(core, conv, 4)  # turns 6-9
    await lifecycle.settle()
    assert model.count("naming") == 1
    assert len(core.events(conv, "title_assigned")) == 1
    call = next(c for c in model.calls if c["kind"] == "naming")
    assert call["system"] == NAMING_SYSTEM and call["alias"] == "haiku"
    assert "Message 1 about the NAS backup" in call["prompt"]


async def test_a_title_given_before_any_turn_is_replaced_at_turn_five(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # An escalation names the owner's conversation before it holds a turn (bot.strangers):
    # that title must not stop the naming at turn 5 once the owner talks there.
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("telegram")).id
    await core.manager.set_title_topics(conv, "Escalation: Eve (telegram)", [], 0)
    await _user_turns(core, conv, 4)
    await core.manager.append_turn(conv, "user", "Message 5 about the NAS backup")
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title is not None and "NAS Backup Plan" in row.title
    assert row.last_named_turn == 5 and model.count("naming") == 1


async def test_concurrent_fifth_and_sixth_messages_name_once(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.gate = asyncio.Event()
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 4)
    await core.manager.append_turn(conv, "user", "five")
    await core.manager.append_turn(conv, "user", "six", turn_number=6)
    await asyncio.sleep(0)
    model.gate.set()
    await lifecycle.settle()
    assert model.count("naming") == 1
    assert len(core.events(conv, "title_assigned")) == 1


async def test_a_naming_covers_the_turns_it_read_not_those_that_came_during_it(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the naming recorded the turn count after the model answered, so two
    # messages sent while it was asked made a title of turns 1-5 "named through 7", and
    # the re-naming due ten turns after the naming waited for turn 17.
    model.gate = asyncio.Event()
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await asyncio.wait_for(_until(lambda: model.count("naming") == 1), 10)  # model waits
    await _user_turns(core, conv, 2)  # turns 6 and 7, while the model is asked
    model.gate.set()
    await lifecycle.settle()
    (named,) = core.events(conv, "title_assigned")
    assert named["throughTurn"] == 5 and (await core.row(conv)).last_named_turn == 5
    model.naming = '{"title": "Offsite Backups", "topics": ["backups"], "suggestSplit": false}'
    await _user_turns(core, conv, 8)  # turn 15: ten since the turns it was named from
    clock.advance(600)
    await lifecycle.run_due()
    assert (await core.row(conv)).title == "Offsite Backups"
    assert core.events(conv, "title_assigned")[-1]["throughTurn"] == 15


async def test_never_named_over_a_manual_title(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 3)
    await core.manager.rename(conv, "My Own Title")
    await _user_turns(core, conv, 12)  # past turn 5 and past the re-naming interval
    clock.advance(600)
    await lifecycle.run_due()  # idle: abbreviation, re-naming must not happen
    row = await core.row(conv)
    assert row.title == "My Own Title" and row.manually_named
    assert model.count("naming") == 0
    assert core.events(conv, "title_assigned") == []
    assert len(core.events(conv, "abbreviation")) == 1


async def test_a_manual_rename_after_the_naming_is_never_renamed(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # The owner renames a conversation the model named: no idle pass, sweep or start
    # re-names it later, however many turns pass.
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "NAS Backup Plan"
    await core.manager.rename(conv, "Mine")
    await _user_turns(core, conv, 12)
    clock.advance(600)
    await lifecycle.run_due()  # idle pass (12 turns since the naming), then a sweep
    clock.advance(300)
    await lifecycle.run_due()
    await lifecycle.stop(timeout=1)
    restarted = await make_lifecycle(model)  # the start's owed namings
    await restarted.settle()
    assert model.count("naming") == 1
    row = await core.row(conv)
    assert row.title == "Mine" and row.manually_named
    assert len(core.events(conv, "title_assigned")) == 1


async def test_manual_rename_while_naming_is_in_flight_wins(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.gate = asyncio.Event()
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await asyncio.wait_for(_until(lambda: model.count("naming") == 1), 10)  # model waits
    await core.manager.rename(conv, "Typed By Hand")
    model.gate.set()
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title == "Typed By Hand" and row.manually_named


async def test_renamed_on_idle_after_ten_more_turns(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "NAS Backup Plan"
    await _user_turns(core, conv, 9)  # turn 14: only 9 since the naming
    clock.advance(600)
    await lifecycle.run_due()
    assert model.count("naming") == 1

    model.naming = '{"title": "Offsite Backups", "topics": ["backups"], "suggestSplit": false}'
    await _user_turns(core, conv, 1)  # turn 15: 10 since the naming at 5
    clock.advance(600)
    await lifecycle.run_due()
    row = await core.row(conv)
    assert row.title == "Offsite Backups" and row.topics == ["backups"]
    assert row.last_named_turn == 15
    rename = core.events(conv, "title_assigned")[-1]
    assert rename["title"] == "Offsite Backups" and rename["throughTurn"] == 15
    call = [c for c in model.calls if c["kind"] == "naming"][-1]
    assert "Notes on the whole conversation" in call["prompt"]  # the fresh abbreviation
    assert 'Current title: "NAS Backup Plan"' in call["prompt"]

    # Same title again ten turns later: recorded as a meta_update (topics refresh).
    await _user_turns(core, conv, 10)
    clock.advance(600)
    await lifecycle.run_due()
    assert core.events(conv, "meta_update")[-1]["throughTurn"] == 25
    assert len(core.events(conv, "title_assigned")) == 2

    # An answer without topics keeps the conversation's (session 39: they were wiped).
    model.naming = '{"title": "Offsite Backup Rotation"}'
    await _user_turns(core, conv, 10)
    clock.advance(600)
    await lifecycle.run_due()
    row = await core.row(conv)
    assert row.title == "Offsite Backup Rotation" and row.topics == ["backups"]


async def test_suggest_split_leaves_one_note_for_the_next_reply(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.naming = (
        '```json\n{"title": "Server Check and Birthday Gift", "topics": '
        '["server-check", "birthday-gift"], "suggestSplit": true, '
        '"splitTopic": "the birthday gift"}\n```'
    )
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    notes = core.manager.take_notes(conv)
    assert len(notes) == 1
    assert "the birthday gift" in notes[0] and "server-check" in notes[0]
    assert core.manager.take_notes(conv) == []  # used once


SPLIT_NAMING = (
    '{"title": "Server Check and Birthday Gift", "topics": ["server-check", '
    '"birthday-gift"], "suggestSplit": true, "splitTopic": "the birthday gift"}'
)


async def _renamed_after_a_restart(
    core: Core,
    clock: ManualClock,
    make_lifecycle: MakeLifecycle,
    model: ScriptedModel,
    before_restart: Callable[[str], Awaitable[None]],
) -> tuple[Core, str]:
    """Name a conversation the model says mixes two subjects, run ``before_restart``
    (its id), restart (new database connection, manager and lifecycle over the same
    files), then add ten turns and let the idle pass re-name it (still two subjects)."""
    model.naming = SPLIT_NAMING
    first = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await first.settle()
    await before_restart(conv)
    await first.stop(timeout=1)
    await core.close()
    restarted = await Core.open(core.config)
    core.db = restarted.db  # closed by the fixture's teardown
    second = await make_lifecycle(model, on=restarted)
    await second.settle()
    await _user_turns(restarted, conv, 10)  # turn 15: due a re-naming
    clock.advance(600)
    await second.run_due()
    assert model.count("naming") == 2
    return restarted, conv


async def test_a_split_offered_before_a_restart_is_not_offered_again(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: "offered once" was a set in memory: after a restart, the next
    # re-naming that still saw two subjects left the offer again, and the owner read
    # "shall we move the birthday gift to a fresh conversation?" once per restart.
    async def delivered(conv: str) -> None:
        notes = tuple(core.manager.take_notes(conv))
        assert len(notes) == 1
        title_event = core.events(conv, "title_assigned")[-1]
        assert title_event["splitSuggested"] == "the birthday gift"
        # the owner's next reply delivered it (bot.replies says so on the bus)
        await core.bus.emit("notes_delivered", conversation_id=conv, notes=notes)
        assert core.events(conv, "meta_update")[-1]["splitOffered"] is True

    restarted, conv = await _renamed_after_a_restart(core, clock, make_lifecycle, model, delivered)
    assert restarted.manager.take_notes(conv) == []
    assert "splitSuggested" not in restarted.events(conv, "meta_update")[-1]


async def test_a_split_queued_but_never_delivered_before_a_restart_is_offered_again(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the naming event said "offered" as soon as the offer was queued for
    # the next reply, in memory; a restart before that reply (or a reply that failed)
    # lost it, and every later naming took it as made: it never was.
    async def queued_only(conv: str) -> None:
        assert len(core.manager.take_notes(conv)) == 1  # no reply delivered it

    restarted, conv = await _renamed_after_a_restart(
        core, clock, make_lifecycle, model, queued_only
    )
    [offer] = restarted.manager.take_notes(conv)  # offered at the re-naming
    assert "the birthday gift" in offer


async def test_garbage_from_the_model_falls_back_to_offline_naming(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.naming = "Sure! Here is a title for you: backups"
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5, text="photographs backup schedule")
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title and row.title == clean_title(row.title)
    assert core.manager.take_notes(conv) == []


async def test_model_outage_names_offline(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    _, conv = await _named_in_an_outage(core, make_lifecycle, model)
    assert (await core.row(conv)).title


async def test_offline_naming_without_a_key(core: Core, make_lifecycle: MakeLifecycle) -> None:
    lifecycle = await make_lifecycle()  # offline brain
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5, text="kitchen renovation budget")
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title and len(row.title) <= 80 and 1 <= len(row.title.split()) <= 6
    assert row.title == title_case(row.title)
    assert all(t == kebab(t) for t in row.topics)
    # Its key words, and named for good (no model owes it a title: nothing re-asks).
    assert row.title.startswith("Kitchen Renovation Budget") and "kitchen" in row.topics
    assert row.last_named_turn == 5
    # A Telegram chat's keyword title names the contact too, offline.
    chat = (
        await core.manager.create(
            "telegram", identity_key="telegram:7", channel_meta={"contact": "Hanan"}
        )
    ).id
    await _user_turns(core, chat, 5, text="kitchen renovation budget")
    await lifecycle.settle()
    assert (await core.row(chat)).title.startswith("Hanan — Kitchen Renovation Budget")


async def test_telegram_title_names_the_contact(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.naming = '{"title": "server check", "topics": ["server"], "suggestSplit": false}'
    lifecycle = await make_lifecycle(model)
    conv = (
        await core.manager.create(
            "telegram", identity_key="telegram:7", channel_meta={"contact": "Hanan"}
        )
    ).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "Hanan — Server Check"
    call = next(c for c in model.calls if c["kind"] == "naming")
    assert "Telegram chat with Hanan" in call["prompt"]


def test_contact_name_skips_numeric_ids() -> None:
    turns = [{"role": "user", "content": "hi", "sender": "Robin"}]
    assert contact_name(_record("telegram", contact="123456789"), turns) == "Robin"
    assert contact_name(_record("telegram", contact="-100200"), []) is None
    assert contact_name(_record("telegram", contact="Family  Chat"), turns) == "Family Chat"


def _record(channel: str, **meta: object) -> ConversationRecord:
    return ConversationRecord(
        id="conv-x", channel=channel, created="", updated="", channel_meta=dict(meta)
    )


async def test_email_titles_start_from_the_subject() -> None:
    namer = Namer(None)
    turns = [{"role": "user", "content": "Can we move the budget review?", "turnNumber": 1}]
    naming = await namer.name(_record("email", subject="Re: Fwd: quarterly budget review"), turns)
    assert naming.title == "Quarterly Budget Review" and naming.method == "subject"
    assert "quarterly-budget-review" in naming.topics

    model = ScriptedModel()
    model.naming = '{"title": "Budget Review Moved to Friday", "topics": ["budget"]}'
    naming = await Namer(model).name(_record("email", subject="RE: budget review"), turns)
    assert naming.title == "Budget Review Moved to Friday"
    assert 'subject "budget review"' in model.calls[0]["prompt"]


def test_title_rules() -> None:
    assert title_case("weekend trip to the alps") == "Weekend Trip to the Alps"
    assert title_case("fixing the API for iPhone users") == "Fixing the API for iPhone Users"
    assert title_case("parsing user_id and P60 forms") == "Parsing user_id and P60 Forms"
    assert clean_title('"Title: debugging the login flow."') == "Debugging the Login Flow"
    long = clean_title("one two three four five six seven eight")
    assert long == "One Two Three Four Five Six"
    # Regression: cut to six words mid-phrase, it ended "... Backups for The".
    cut = clean_title("Setting up automatic backups for the home server")
    assert cut == "Setting Up Automatic Backups"
    assert (
        clean_title("Budget review, and the March delivery")
        == "Budget Review, and the March Delivery"
    )
    assert clean_title("Visit Lisbon and Porto and the Douro") == "Visit Lisbon and Porto"
    assert clean_title("Compare offers: Telekom, Vodafone, and the rest") == (
        "Compare Offers: Telekom, Vodafone"
    )
    assert len(clean_title("x" * 200)) <= 80
    assert clean_subject("Re: RE: Fwd: [team] Launch plan") == "Launch plan"
    # Regression (session 39): emphasis inside the title stayed ("Server** _Launch_ ...")
    assert clean_title("**Server** _Launch_ `Plan`") == "Server Launch Plan"
    assert clean_title("Review of *Dune*") == "Review of Dune"
    assert clean_title("parsing user_id and snake_case_names") == (
        "Parsing user_id and snake_case_names"
    )


def test_an_email_title_drops_the_reply_prefixes_of_every_language_the_channel_folds() -> None:
    """Titles had their own short list of prefixes: "Antw: Budget" was the title of a
    thread the e-mail channel answered as "Re: Budget"."""
    assert clean_subject("Antw: AW: Budget 2027") == "Budget 2027"
    assert clean_subject("回复: 会议安排") == "会议安排"
    assert clean_subject("RE: [EXTERNAL] Re: [EXTERNAL] Offsite") == "Offsite"
    assert clean_subject("RE[2]: Vá: Szállás") == "Szállás"
    assert clean_subject("Versions: 2.0 and 3.0") == "Versions: 2.0 and 3.0"  # no prefix


def test_topics_are_kebab_case() -> None:
    assert clean_topics(["Server Monitoring", "server-monitoring", "CI/CD", 7, None]) == [
        "server-monitoring",
        "ci-cd",
        "7",
    ]
    assert clean_topics("a, b; c") == ["a", "b", "c"]
    assert clean_topics({"not": "a list"}) == []
    assert len(clean_topics([f"t{i}" for i in range(20)])) == 5


def test_parse_naming_is_defensive() -> None:
    assert parse_naming('noise {"title": "A B"} trailing') == {"title": "A B"}
    assert parse_naming('```json\n{"title": "X Y"}\n```') == {"title": "X Y"}
    assert parse_naming("no json here") is None
    assert parse_naming("{broken json") is None
    assert parse_naming("[1, 2]") is None


async def test_a_missed_first_naming_happens_on_the_next_idle_pass(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 6)  # the daemon's lifecycle was not running
    lifecycle = await make_lifecycle(model)
    clock.advance(660)  # turns are wall-clock stamped a moment after the clock's start
    await lifecycle.run_due()  # idle pass: notes, then the overdue naming
    row = await core.row(conv)
    assert row.title == "NAS Backup Plan" and row.last_named_turn == 6
    assert model.count("naming") == 1
    assert len(core.events(conv, "title_assigned")) == 1


async def test_a_fenced_answer_with_braces_in_the_prose_after_it_keeps_the_model_title() -> None:
    # Regression: one greedy match ran from the first "{" to the last "}", so braces in
    # the chatter after the object made the whole answer invalid JSON and the model's
    # title was dropped for the offline keyword title.
    model = ScriptedModel()
    model.naming = (
        '```json\n{"title": "Boiler Repair Quote", "topics": ["boiler"], '
        '"suggestSplit": false, "splitTopic": null}\n```\n'
        "I kept {boiler} as the main theme; the other option was {heating}."
    )
    turns = [{"role": "user", "content": "The plumber quoted 900 EUR", "turnNumber": 1}]
    naming = await Namer(model).name(_record("web"), turns)
    assert naming.method == "llm" and naming.title == "Boiler Repair Quote"
    assert parse_naming('Options: {"title": "A B"} or {"title": "C D"}') == {"title": "A B"}
    assert parse_naming('{"result": {"title": "Inner One"}}') == {"title": "Inner One"}


async def test_a_telegram_title_that_repeats_the_contact_is_not_doubled(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the model wrote the contact although the prompt says it is prefixed,
    # and the title became "Hanan — Hanan — Server Check".
    model.naming = '{"title": "Hanan — Server Check", "topics": ["server"]}'
    lifecycle = await make_lifecycle(model)
    conv = (
        await core.manager.create(
            "telegram", identity_key="telegram:7", channel_meta={"contact": "Hanan"}
        )
    ).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "Hanan — Server Check"
    model.naming = '{"title": "Hananfest Planning", "topics": ["party"]}'
    naming = await Namer(model).name(_record("telegram", contact="Hanan"), [])
    assert naming.title == "Hanan — Hananfest Planning"  # a word that only starts alike


async def test_a_failed_renaming_keeps_the_models_title(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: when the model could not re-name (down, or an answer without JSON),
    # the offline keyword title replaced the model's good title on that idle pass.
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "NAS Backup Plan"
    for failure in (unavailable(), "Sorry, I can't produce JSON today."):
        model.naming = failure
        await _user_turns(core, conv, 10, text="photographs archive rotation")
        clock.advance(600)
        cost = (await core.row(conv)).cost_total
        model.naming_cost = 0.25  # what each naming call is billed
        await lifecycle.run_due()
        model.naming_cost = 0.0
        row = await core.row(conv)
        assert row.title == "NAS Backup Plan" and row.last_named_turn == 5
        if isinstance(failure, str):
            # Regression (session 39): a call answered without a usable title was paid
            # for and recorded nowhere (/status left it out of the cost)
            assert row.cost_total == pytest.approx(cost + 0.25), (cost, row.cost_total)
    model.naming = '{"title": "Photo Archive Rotation", "topics": ["photos"]}'
    await _user_turns(core, conv, 1, text="photographs archive rotation")
    clock.advance(600)
    await lifecycle.run_due()  # the next idle pass asks the model again
    assert (await core.row(conv)).title == "Photo Archive Rotation"


async def test_a_first_title_from_keywords_in_an_outage_is_asked_again_on_idle(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: when the model was down at the 5th message the conversation got the
    # offline keyword title, and the idle passes after the model came back kept it:
    # only ten more turns brought a real title, so a conversation that ended there kept
    # the keyword one for good.
    lifecycle, conv = await _named_in_an_outage(core, make_lifecycle, model)
    keywords = (await core.row(conv)).title
    assert keywords and keywords != "NAS Backup Plan"
    clock.advance(600)
    await lifecycle.run_due()  # still down: the keyword title stays
    assert (await core.row(conv)).title == keywords
    model.naming = '{"title": "Kitchen Renovation Budget", "topics": ["kitchen"]}'
    await _user_turns(core, conv, 1, text="kitchen renovation budget")
    clock.advance(600)
    await lifecycle.run_due()  # the model is back: the next idle pass names it
    row = await core.row(conv)
    assert row.title == "Kitchen Renovation Budget" and row.last_named_turn == 6
    # Regression (session 39): the stand-in was offered as a title to keep; a model that
    # kept it made the keywords a title of its own
    asked = [c["prompt"] for c in model.calls if c["kind"] == "naming"][-1]
    assert "Current title" not in asked and keywords not in asked
    calls = model.count("naming")
    await _user_turns(core, conv, 1, text="kitchen renovation budget")
    clock.advance(600)
    await lifecycle.run_due()  # named by the model now: no more asking every pass
    assert model.count("naming") == calls


async def test_a_naming_killed_after_the_notes_is_done_at_the_next_start(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the idle pass wrote the notes through turn 6 and the process was killed
    # during the naming that follows them (or the turn-5 naming in flight). Nothing
    # recorded that naming was owed: with notes covering every turn and no flag, the next
    # start queued nothing, and only a further message from the owner named it, so a
    # finished conversation stayed "Untitled" for good.
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 6)  # the process that received them, no lifecycle
    # a conversation renamed by hand, or short of the naming turn, is left alone
    renamed = (await core.manager.create("web")).id
    await _user_turns(core, renamed, 6)
    await core.manager.rename(renamed, "My own title")
    short = (await core.manager.create("web")).id
    await _user_turns(core, short, 3)
    for each in (conv, renamed, short):
        await core.manager.set_abbreviation(each, "Notes about the NAS backup.", None)
    row = await core.row(conv)
    assert row.abbreviated_turn == 6 and not row.needs_abbreviation and row.title is None
    lifecycle = await make_lifecycle(model)  # the next start
    await lifecycle.settle()
    row = await core.row(conv)
    assert row.title == "NAS Backup Plan" and row.last_named_turn == 6
    assert model.count("naming") == 1 and model.count("abbreviation") == 0
    assert (await core.row(renamed)).title == "My own title"
    assert (await core.row(short)).title is None


async def test_naming_owed_at_a_start_in_an_outage_is_retried_on_the_sweep(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the start's naming of conversations a previous run left unnamed asked
    # the model once; down then, one got the offline keyword title (counted as named, so
    # no later start or sweep asked again) and one with an escalation's placeholder title
    # kept it. Both stayed so while the daemon ran, and the first for good.
    untitled = (await core.manager.create("web")).id
    await _user_turns(core, untitled, 6, text="kitchen renovation budget")
    placeholder = (await core.manager.create("telegram")).id
    await core.manager.set_title_topics(placeholder, "Escalation: Eve (telegram)", [], 0)
    await _user_turns(core, placeholder, 6)
    for each in (untitled, placeholder):
        await core.manager.set_abbreviation(each, "Notes.", None)
    model.naming = unavailable()
    lifecycle = await make_lifecycle(model)  # the start, in an outage
    await lifecycle.settle()
    keywords = (await core.row(untitled)).title
    assert keywords and keywords != "NAS Backup Plan"
    assert (await core.row(placeholder)).title == "Escalation: Eve (telegram)"
    calls = model.count("naming")
    for _ in range(3):  # still down: retried with a backoff, not at every sweep
        clock.advance(300)
        await lifecycle.run_due()
    assert 0 < model.count("naming") - calls <= 2
    model.naming = '{"title": "Kitchen Renovation Budget", "topics": ["kitchen"]}'
    clock.advance(3600)  # the model is back: a sweep names them
    await lifecycle.run_due()
    row = await core.row(untitled)
    assert row.title == "Kitchen Renovation Budget" and row.last_named_turn == 6
    row = await core.row(placeholder)
    assert row.title is not None and "Kitchen Renovation Budget" in row.title
    assert row.last_named_turn == 6
    calls = model.count("naming")
    clock.advance(3600)
    await lifecycle.run_due()  # named: no more asking
    assert model.count("naming") == calls


async def test_a_keyword_title_from_an_outage_is_still_owed_after_a_restart(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: the offline title given in an outage counted as a naming, and the
    # "ask the model again" was kept in memory: after a restart the conversation kept
    # its keyword title until ten more turns.
    lifecycle, conv = await _named_in_an_outage(core, make_lifecycle, model)
    assert (await core.row(conv)).title
    await lifecycle.stop(timeout=1.0)
    model.naming = '{"title": "Kitchen Renovation Budget", "topics": ["kitchen"]}'
    again = await make_lifecycle(model)  # the next start, the model back
    clock.advance(660)  # recovery re-arms the timer from the wall-clock turn stamps
    await again.run_due()  # the idle pass: notes, then the naming still owed
    row = await core.row(conv)
    assert row.title == "Kitchen Renovation Budget" and row.last_named_turn == 5


async def _refused_and_owed(core: Core) -> tuple[str, str]:
    """Two conversations with notes whose naming is owed: the model refuses the first
    (:func:`_refuses_zebra`), names the second."""
    refused = (await core.manager.create("web")).id
    await _user_turns(core, refused, 6, text="zebra crossing fines")
    owed = (await core.manager.create("web")).id
    await _user_turns(core, owed, 6, text="kitchen renovation budget")
    for each in (refused, owed):
        await core.manager.set_abbreviation(each, "Notes.", None)
    return refused, owed


def _refuses_zebra(system: str, prompt: str) -> str:
    if "zebra" in prompt:
        raise RequestRefused("400 invalid request")
    return '{"title": "Kitchen Renovation Budget", "topics": ["kitchen"]}'


async def test_one_conversation_the_model_refuses_does_not_stop_the_naming_retries(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # The retry stops at the first failure (the model down: no call per conversation);
    # one the model always refuses went first every time and no other was retried.
    refused, owed = await _refused_and_owed(core)

    model.naming = unavailable()
    lifecycle = await make_lifecycle(model)
    await lifecycle.settle()
    model.naming = _refuses_zebra
    for _ in range(4):
        clock.advance(1200)
        await lifecycle.run_due()
    assert (await core.row(owed)).title == "Kitchen Renovation Budget"
    assert (await core.row(refused)).last_named_turn == 0  # still owed


async def test_a_renaming_the_model_failed_is_retried_on_the_sweep(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: a re-naming the model failed (down at the idle pass) was asked again
    # only at the next idle pass, which a conversation that ended there never has: its
    # title stayed the one of its first five turns.
    lifecycle = await make_lifecycle(model)
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5)
    await lifecycle.settle()
    assert (await core.row(conv)).title == "NAS Backup Plan"
    await _user_turns(core, conv, 10, text="photographs archive rotation")
    model.naming = unavailable()
    clock.advance(600)
    await lifecycle.run_due()  # the notes are written, the re-naming fails
    row = await core.row(conv)
    assert row.abbreviated_turn == 15 and row.title == "NAS Backup Plan"
    model.naming = '{"title": "Photo Archive Rotation", "topics": ["photos"]}'
    clock.advance(3600)  # no more messages: the sweep asks again
    await lifecycle.run_due()
    row = await core.row(conv)
    assert row.title == "Photo Archive Rotation" and row.last_named_turn == 15


FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl: one character


def test_titles_are_cut_between_characters_not_inside_them() -> None:
    # Regression: cut at 80 code points, a title ended on a consonant whose vowel sign
    # (or a family emoji whose child) was past the cut.
    hindi = clean_title("क्षत्रिय" * 12)  # 8 code points, 3 clusters each, no space
    assert len(hindi) <= 80 and hindi == "क्षत्रिय" * 10
    emoji = clean_title("a" * 78 + FAMILY)
    assert emoji == "A" + "a" * 77
    assert contact_name(_record("telegram", contact="x" * 38 + FAMILY), []) == "x" * 38


async def test_a_renaming_that_keeps_the_title_is_not_logged_as_a_second_naming(
    core: Core,
    clock: ManualClock,
    make_lifecycle: MakeLifecycle,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: "named conv-... (keywords)" was logged twice for one conversation (a
    # daemon with the offline brain): the idle re-naming ten turns on, which kept the
    # title (a meta_update, not a second title_assigned), logged the same "named" line.
    caplog.set_level(logging.INFO, logger="my_agent.lifecycle")
    lifecycle = await make_lifecycle()  # offline brain
    conv = (await core.manager.create("web")).id
    await _user_turns(core, conv, 5, text="kitchen renovation budget")
    await lifecycle.settle()
    assert (await core.row(conv)).last_named_turn == 5
    await _user_turns(core, conv, 10, text="kitchen renovation budget")
    await lifecycle.settle()
    clock.advance(600)
    await lifecycle.run_due()
    assert (await core.row(conv)).last_named_turn == 15  # re-named on the idle pass
    assert len(core.events(conv, "title_assigned")) == 1
    assert core.events(conv, "meta_update")[-1]["throughTurn"] == 15
    said = [r.getMessage() for r in caplog.records if conv in r.getMessage()]
    assert len([m for m in said if m.startswith("named ")]) == 1, said
    assert len([m for m in said if m.startswith("re-named, title kept: ")]) == 1, said


async def test_an_offline_email_title_is_its_subject_cleaned_as_a_title() -> None:
    # Regression: offline, the subject was only put in Title Case: "🎉 Party on
    # Saturday! 🎂" and "URGENT: SERVER DOWN AGAIN" were titles, where the model's
    # are cleaned of emoji, capitals and trailing punctuation. A long subject stays whole.
    namer = Namer(None)
    turns = [{"role": "user", "content": "See you there, bring the cake.", "turnNumber": 1}]

    async def title(subject: str) -> str:
        return (await namer.name(_record("email", subject=subject), turns)).title

    assert await title("Fwd: 🎉 Party on Saturday! 🎂") == "Party on Saturday"
    assert await title("URGENT: SERVER DOWN AGAIN") == "Urgent: Server Down Again"
    assert await title('Re: "Quarterly report" draft...') == '"Quarterly Report" Draft'
    whole = "the meeting about the budget for the next year and the one after"
    assert await title(whole) == (
        "The Meeting About the Budget for the Next Year and the One After"
    )
    # a subject of emoji alone says nothing: the turns' keywords name it
    naming = await namer.name(_record("email", subject="🎉🎂"), turns)
    assert naming.method == "keywords" and naming.title


async def test_a_forwarded_mail_has_no_topic_fwd() -> None:
    # Regression: the turn of a forwarded mail starts "Subject: Fwd: Lisbon trip"
    # (channels/email/inbound.py), and "fwd" was one of the conversation's topics.
    turns = [
        {"role": "user", "content": f"Subject: {prefix}Lisbon trip\n\n{text}", "turnNumber": n}
        for n, (prefix, text) in enumerate(
            [
                ("Fwd: ", "Can you book the hotel near Alfama for the Lisbon trip?"),
                ("Re: Fwd: ", "Also the flights for the Lisbon trip on Friday."),
            ],
            start=1,
        )
    ]
    naming = await Namer(None).name(_record("email", subject="Fwd: Lisbon trip"), turns)
    assert naming.title == "Lisbon Trip"
    assert "lisbon" in naming.topics and "fwd" not in naming.topics, naming.topics


async def test_naming_failures_are_counted_only_while_the_naming_is_owed(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression (session 41): a conversation whose naming the model failed kept its
    # count (the retries' order) for the life of the daemon, named since or not.
    refused, owed = await _refused_and_owed(core)

    model.naming = unavailable()
    lifecycle = await make_lifecycle(model)
    await lifecycle.settle()
    for _ in range(4):  # the outage: each sweep's retry fails at its first
        clock.advance(1200)
        await lifecycle.run_due()
    assert set(lifecycle._naming_failures) == {refused, owed}
    model.naming = _refuses_zebra
    for _ in range(6):  # (past the backoff the outage left)
        clock.advance(3600)
        await lifecycle.run_due()
    assert (await core.row(owed)).title == "Kitchen Renovation Budget"
    assert set(lifecycle._naming_failures) == {refused}  # still owed, still counted
    await core.manager.rename(refused, "Zebra Fines")  # by hand: owed no more
    for _ in range(4):  # the next sweep retrying the namings, past the backoff
        clock.advance(3600)
        await lifecycle.run_due()
    assert not lifecycle._naming_failures


async def test_split_offers_are_kept_for_the_latest_conversations_only(
    core: Core, make_lifecycle: MakeLifecycle, model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 41): a split offer no reply delivered (the conversation never
    # continued) stayed queued for the life of the daemon, one per conversation.
    monkeypatch.setattr("bot.lifecycle.RECORDS", 2, raising=False)  # (2,048)
    model.naming = SPLIT_NAMING
    lifecycle = await make_lifecycle(model)
    convs = []
    for _ in range(3):
        convs.append((await core.manager.create("web")).id)
        await _user_turns(core, convs[-1], 5)
        await lifecycle.settle()
    assert list(lifecycle._split_notes) == convs[1:]
    assert list(lifecycle._split_noted) == convs[1:]
    notes = tuple(core.manager.take_notes(convs[2]))
    await core.bus.emit("notes_delivered", conversation_id=convs[2], notes=notes)
    assert core.events(convs[2], "meta_update")[-1]["splitOffered"] is True
    assert list(lifecycle._split_notes) == convs[1:2]
