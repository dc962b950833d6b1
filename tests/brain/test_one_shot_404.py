"""A 404 on a one-shot call (notes, titles) is the model's only when the API says so.

Regression (session 40): any 404 was taken for "the service does not offer haiku": a
proxy's 404 page on one notes call told the owner to fix ``models.aliases.haiku`` and
restart (the configuration was fine), refused ``/model haiku`` and wrote the offline
stand-in at once. The reply path asked the Models API first; now the one-shot path does.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.base import BrainUnavailable, ModelNotFound

HAIKU = "claude-haiku-4-5"


async def complete(brain: AnthropicBrain) -> str:
    return await brain.complete(system="Write notes.", prompt="the conversation")


async def test_a_proxys_404_page_is_an_outage_not_a_missing_model(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    page = b"<html><body>404 Not Found (nginx)</body></html>"
    fake_api.push(Scripted(status=404, raw=page, raw_type="text/html"))
    with pytest.raises(BrainUnavailable) as raised:
        await complete(brain)
    assert not isinstance(raised.value, ModelNotFound)
    assert fake_api.model_requests == []  # no error type of the API's: nothing to ask


async def test_a_404_the_models_api_contradicts_is_not_a_missing_model(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.push_error(404, message="Not found: /v1/messages")  # a misrouted request
    with pytest.raises(BrainUnavailable) as raised:
        await complete(brain)
    assert not isinstance(raised.value, ModelNotFound)
    assert fake_api.model_requests == [HAIKU]  # asked, and the model is offered


async def test_a_model_the_service_does_not_offer_is_still_named(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.unknown_models.add(HAIKU)
    with pytest.raises(ModelNotFound) as raised:
        await complete(brain)
    assert raised.value.alias == "haiku" and raised.value.model_id == HAIKU
