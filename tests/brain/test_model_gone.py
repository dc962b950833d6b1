"""A conversation's model the service no longer offers (a retired id, an alias removed
from the configuration): the reply comes from ``models.default`` with a note, the
conversation is switched to it, and a 404 about anything else keeps the notice
(bot/brain/model_fallback.py, bot/model_switch.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI, Scripted
from bot.brain.anthropic import RESTRICTED_FALLBACK, AnthropicBrain
from bot.brain.base import BrainReply, BrainRequest
from bot.model_switch import forget_dropped_model
from bot.services import Services
from tests.brain.conftest import party_question, seed_conversation
from tests.brain.test_model_not_found import replies, say
from tests.brain.test_model_not_found import services as services  # the fixture
from tests.brain.test_router_e2e import wait_for


def models_asked(fake: FakeAnthropicAPI) -> list[str]:
    return [r.body["model"] for r in fake.requests]


async def on_opus(services: Services) -> str:
    """A conversation switched to opus by /model; its id."""
    await say(services, "/model opus", "m0")
    await wait_for(lambda: len(replies(services)) == 1)
    conv = (await services.conversations.list())[0]
    assert conv.model == "opus"
    return conv.id


def dropped(services: Services, conv_id: str) -> list[dict]:
    """The transcript's events switching away from a model the service does not offer
    (written after the reply is stored and sent)."""
    return [line for line in services.conversations.read_lines(conv_id) if "droppedModel" in line]


async def switched_model(services: Services, conv_id: str) -> str | None:
    """The conversation's model once its switch away from opus is in the index too: the
    transcript's event is durable first and the index row follows (the test read the row
    in between once, in CI)."""
    await wait_for(lambda: bool(dropped(services, conv_id)))
    async with asyncio.timeout(10):
        while True:
            rec = await services.conversations.get(conv_id)
            if rec is not None and rec.model != "opus":
                return rec.model
            await asyncio.sleep(0.02)


async def test_a_retired_model_is_answered_by_the_default_once_told(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the stored alias went to the API in every reply, each a 404 notice,
    # for ever (and /new inherited it).
    conv_id = await on_opus(services)
    opus, sonnet = services.config.resolve_model("opus"), services.config.resolve_model("sonnet")
    fake_api.unknown_models.add(opus)  # retired after the switch
    fake_api.push_text("Sunday it opens at ten.")
    await say(services, "Is the shop open on Sunday?", "m1")
    await wait_for(lambda: len(replies(services)) == 2)
    answer = replies(services)[1]
    note, _, rest = answer.partition("\n\n")
    assert rest == "Sunday it opens at ten."
    assert f"opus ({opus})" in note and "not offered by the model service" in note
    assert f"sonnet ({sonnet}), the default, answered" in note
    assert "/model (haiku)" in note
    assert models_asked(fake_api) == [opus, sonnet]
    assert await switched_model(services, conv_id) == "sonnet"
    lines = services.conversations.read_lines(conv_id)
    switch = dropped(services, conv_id)
    assert [(s["event"], s["model"], s["droppedModel"]) for s in switch] == [
        ("meta_update", "sonnet", "opus")
    ]
    reply_turn = [line for line in lines if line.get("role") == "assistant"][-1]
    assert reply_turn["model"] == sonnet and reply_turn["modelDropped"] == "opus"
    # the next reply asks sonnet alone, with no note
    fake_api.push_text("Yes, Saturday too.")
    await say(services, "And Saturday?", "m2")
    await wait_for(lambda: len(replies(services)) == 3)
    assert replies(services)[2] == "Yes, Saturday too."
    assert models_asked(fake_api) == [opus, sonnet, sonnet]


async def test_an_alias_removed_from_the_configuration_is_answered_by_the_default(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    conv_id = await on_opus(services)
    del services.config.models.aliases["opus"]  # the owner's edit, then a restart
    fake_api.unknown_models.add("opus")  # its name now goes to the API as an id
    fake_api.push_text("Here.")
    await say(services, "hello?", "m1")
    await wait_for(lambda: len(replies(services)) == 2)
    assert "opus (no longer in models.aliases)" in replies(services)[1]
    assert replies(services)[1].endswith("\n\nHere.")
    assert models_asked(fake_api)[-1] == services.config.resolve_model("sonnet")
    assert await switched_model(services, conv_id) == "sonnet"


async def test_a_404_that_is_not_about_the_model_keeps_the_notice(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    opus = brain.config.resolve_model("opus")
    # the Models API offers opus: the 404 is about something else
    fake_api.push_error(404, message="the requested resource was not found")
    # a proxy's page: not the API's own error, the Models API is not even asked
    fake_api.push(Scripted(status=404, error_message="no route", error_type="api_error"))
    for _ in range(2):
        request = BrainRequest(
            profile="owner", channel="web", text="hello", model_alias="opus", conversation_id=conv
        )
        reply = await brain.reply(request)
        assert reply.extra == {"error": "model_not_found", "status": 404}
    assert models_asked(fake_api) == [opus, opus]
    assert fake_api.model_requests == [opus]


async def test_a_conversation_on_the_default_gets_the_notice(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # nothing to fall back to: the start's check and the notice tell the owner
    sonnet = brain.config.resolve_model("sonnet")
    fake_api.unknown_models.add(sonnet)
    conv = await seed_conversation(core, [("user", "hello")])
    request = BrainRequest(
        profile="owner", channel="web", text="hello", model_alias="sonnet", conversation_id=conv
    )
    reply = await brain.reply(request)
    assert reply.extra == {"error": "model_not_found", "status": 404}
    assert models_asked(fake_api) == [sonnet]


async def test_a_model_known_gone_is_not_asked_again(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # the start's check (or /model) found opus missing: no reply fails a request first
    opus, sonnet = brain.config.resolve_model("opus"), brain.config.resolve_model("sonnet")
    fake_api.unknown_models.add(opus)
    assert await brain.check_model("opus") is not None
    assert brain.missing_models() == {opus: f"model: {opus}"}
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_text("Hi.")
    request = BrainRequest(
        profile="owner", channel="web", text="hello", model_alias="opus", conversation_id=conv
    )
    reply = await brain.reply(request)
    assert reply.text.endswith("\n\nHi.") and reply.extra["modelDropped"] == "opus"
    assert models_asked(fake_api) == [sonnet]
    # offered again (the Models API says so): asked again
    fake_api.unknown_models.discard(opus)
    assert await brain.check_model("opus") is None
    assert brain.missing_models() == {}


async def test_a_known_party_on_a_gone_model_is_answered_quietly(
    brain: AnthropicBrain, fake_api: FakeAnthropicAPI
) -> None:
    opus, sonnet = brain.config.resolve_model("opus"), brain.config.resolve_model("sonnet")
    fake_api.unknown_models.add(opus)
    fake_api.push_text("Robin is away until Monday.")
    request = party_question("opus")
    reply = await brain.reply(request)
    assert reply.text == "Robin is away until Monday."  # no word of the owner's models
    assert models_asked(fake_api) == [opus, sonnet]
    fake_api.push_text("Still away.")
    assert (await brain.reply(request)).text == "Still away."
    assert models_asked(fake_api) == [opus, sonnet, sonnet]
    assert RESTRICTED_FALLBACK not in reply.text


async def test_the_owners_choice_made_meanwhile_is_kept(services: Services) -> None:
    rec = await services.conversations.create("web", model="haiku")
    reply = BrainReply("note\n\nanswer", "m", extra={"modelDropped": "opus", "modelNow": "sonnet"})
    await forget_dropped_model(services, rec.id, reply)  # /model haiku came first
    fresh = await services.conversations.get(rec.id)
    assert fresh is not None and fresh.model == "haiku"


def status_lines(services: Services) -> list[str]:
    return replies(services)[-1].split("\n")


async def test_status_lists_the_models_not_offered_until_offered_again(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the start's notice was sent once a day; /status never said it.
    opus = services.config.resolve_model("opus")
    await on_opus(services)
    fake_api.unknown_models.add(opus)
    fake_api.push_text("Hi.")
    await say(services, "hello", "m1")
    await wait_for(lambda: len(replies(services)) == 2)
    await say(services, "/status", "m2")
    await wait_for(lambda: len(replies(services)) == 3)
    missing = [line for line in status_lines(services) if "does not offer" in line]
    assert missing == [
        f"Models the model service does not offer: {opus} (models.aliases.opus). Fix the "
        "configuration and restart; sonnet (models.default) answers for them meanwhile."
    ]
    fake_api.unknown_models.discard(opus)  # offered again: /model asks and it clears
    await say(services, "/model opus", "m3")
    await wait_for(lambda: len(replies(services)) == 4)
    assert replies(services)[3].startswith("Model switched to opus")
    await say(services, "/status", "m4")
    await wait_for(lambda: len(replies(services)) == 5)
    assert not [line for line in status_lines(services) if "does not offer" in line]


async def test_status_says_replies_on_a_missing_default_are_notices(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    sonnet = services.config.resolve_model("sonnet")
    fake_api.unknown_models.add(sonnet)
    assert await services.brain.check_model("sonnet") is not None  # type: ignore[attr-defined]
    await say(services, "/status", "m1")
    await wait_for(lambda: len(replies(services)) == 1)
    assert (
        f"{sonnet} (models.default, models.aliases.sonnet). Fix the configuration and "
        "restart; replies on sonnet are notices until then."
    ) in replies(services)[0]
