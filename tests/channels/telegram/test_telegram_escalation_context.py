"""The owner's answer to an escalation on Telegram, end to end: the model is given the
escalated message (an event in the owner's chat, not a turn) and told that a party is
answered with /reply (session 39: it got "tell them no" alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.fakes.telegram_api import FakeTelegramServer

from .conftest import OWNER_ID, STRANGER_ID
from .stack import stack_with_model

pytestmark = pytest.mark.slow


async def test_the_owners_answer_to_an_escalation_is_given_with_it(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    async with stack_with_model(tmp_path / "data", tg_server) as (_, model):
        tg_server.inject_message(STRANGER_ID, "I sell a used Volvo XC90, call 555-0199")
        await tg_server.wait_sent(OWNER_ID, 1)  # the escalation
        escalation = tg_server.sent_to(OWNER_ID)[0]["text"]
        tg_server.inject_message(OWNER_ID, "Tell them I'm not interested.")
        await tg_server.wait_sent(OWNER_ID, 2)
    [request] = [r for r in model.requests if "not interested" in r.text]
    assert "used Volvo XC90" in request.text
    party = escalation.split("(id ")[1].split(")")[0]
    assert f"/reply {party} <text>" in request.text
    assert "/reply <id> <text>" in request.text
