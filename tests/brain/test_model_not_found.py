"""A model id the API does not know (404 not_found_error): ``/model`` keeps the current
model, and a reply that meets the 404 says which model and how to switch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from anthropic import AsyncAnthropic

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.anthropic import RESTRICTED_FALLBACK, AnthropicBrain
from bot.brain.base import BrainRequest
from bot.brain.model_check import model_problem
from bot.events import InboundMessage
from bot.services import Services, close_services
from tests.brain.conftest import party_question, seed_conversation
from tests.brain.test_router_e2e import RecordingChannel, e2e_config, start, wait_for


@pytest.fixture
async def services(tmp_path: Path, fake_api: FakeAnthropicAPI) -> AsyncIterator[Services]:
    s = await start(e2e_config(tmp_path, fake_api))
    yield s
    await close_services(s)


async def say(services: Services, text: str, message_id: str) -> None:
    await services.router.deliver(
        InboundMessage(
            channel="web", sender_id="owner", text=text, message_id=message_id, chat_id="dashboard"
        )
    )


def replies(services: Services) -> list[str]:
    web: RecordingChannel = services.channels["web"]  # type: ignore[assignment]
    return [m.text for m in web.sent if m.kind in ("reply", "command")]


async def test_model_the_api_does_not_know_is_not_switched_to(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: /model switched to any configured alias; with its id retired (404),
    # every later reply of the conversation, and of each /new one, was a notice.
    opus = services.config.resolve_model("opus")
    fake_api.unknown_models.add(opus)
    fake_api.push_text("Hello from the current model.")
    await say(services, "hello", "m0")
    await wait_for(lambda: len(replies(services)) == 1)
    await say(services, "/model opus", "m1")
    await wait_for(lambda: len(replies(services)) == 2)
    answer = replies(services)[1]
    assert "not offered by the model service" in answer and opus in answer
    assert "Still using sonnet" in answer and "models.aliases.opus" in answer
    assert fake_api.model_requests == [opus]
    conv = (await services.conversations.list())[0]
    assert conv.model != "opus"
    fake_api.push_text("Still answering.")
    await say(services, "and now?", "m2")
    await wait_for(lambda: len(replies(services)) == 3)
    assert replies(services)[2] == "Still answering."
    assert fake_api.requests[-1].body["model"] == services.config.resolve_model("sonnet")


async def test_the_model_list_marks_a_model_the_api_refused(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: after "/model opus" was refused (404), "/model" still listed opus
    # among the models to switch to, as if it answered.
    opus = services.config.resolve_model("opus")
    fake_api.unknown_models.add(opus)
    await say(services, "/model opus", "m1")
    await wait_for(lambda: len(replies(services)) == 1)
    await say(services, "/model", "m2")
    await wait_for(lambda: len(replies(services)) == 2)
    listing = replies(services)[1]
    assert "Available: opus (not offered by the model service), sonnet, haiku." in listing


async def test_model_the_api_knows_is_switched_to(
    services: Services, fake_api: FakeAnthropicAPI
) -> None:
    await say(services, "/model haiku", "m1")
    await wait_for(lambda: len(replies(services)) == 1)
    assert replies(services)[0].startswith("Model switched to haiku")
    assert fake_api.model_requests == [services.config.resolve_model("haiku")]


async def test_a_model_check_that_cannot_be_made_does_not_block_the_switch() -> None:
    # nothing listens there: an outage (or an endpoint without the Models API) says
    # nothing about the model, and /model must not depend on it
    async with FakeAnthropicAPI() as gone:
        url = gone.base_url
    client = AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
    try:
        assert await model_problem(client, "claude-sonnet-4-5") is None
    finally:
        await client.close()


async def test_a_reply_meeting_a_404_names_the_model_and_how_to_switch(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Before: "rejected the request (404). Try rephrasing, or start a new conversation
    # with /new", and /new inherits the model, so neither could help.
    conv = await seed_conversation(core, [("user", "hello")])
    opus = brain.config.resolve_model("opus")
    fake_api.push_error(404, message=f"model: {opus}")
    request = BrainRequest(
        profile="owner", channel="web", text="hello", model_alias="opus", conversation_id=conv
    )
    reply = await brain.reply(request)
    assert f"does not offer the model {opus} (opus" in reply.text
    assert "/model (sonnet, haiku)" in reply.text and "/new" not in reply.text
    assert reply.extra == {"error": "model_not_found", "status": 404}
    assert len(fake_api.requests) == 1


@pytest.mark.parametrize("status", [400, 404])
async def test_a_known_party_gets_no_owner_notice_when_the_api_rejects(
    brain: AnthropicBrain, fake_api: FakeAnthropicAPI, status: int
) -> None:
    # Regression: a third party was sent the owner's notice, "/model" or "/new" (neither
    # theirs to use) and, on a 404, the configured model's id.
    sonnet = brain.config.resolve_model("sonnet")
    fake_api.push_error(status, message=f"model: {sonnet}")
    request = party_question("sonnet")
    reply = await brain.reply(request)
    assert reply.text == RESTRICTED_FALLBACK
    assert reply.extra["status"] == status  # recorded for the owner's transcript
