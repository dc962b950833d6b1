"""An owner's message Telegram delivers long after it was written (the daemon was down;
Telegram keeps updates a day), end to end: the turn keeps when it was written beside
when it came, and the model is told (session 40: "remind me in 10 minutes", written 20 h
before, was answered as just said)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_script import last_user_text
from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.events import iso

from .conftest import OWNER_ID
from .stack import stack_with_model

pytestmark = pytest.mark.slow

OWNER_KEY = f"telegram:{OWNER_ID}"


async def test_a_message_delivered_late_keeps_when_it_was_written_and_the_model_is_told(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    written = datetime.fromtimestamp(int(time.time()) - 20 * 3600, UTC)
    async with stack_with_model(tmp_path / "data", tg_server) as (stack, model):
        late = tg_server.make_message(OWNER_ID, "Remind me in 10 minutes to call mum")
        late["date"] = int(written.timestamp())
        tg_server.push_update("message", late)
        await tg_server.wait_sent(OWNER_ID, 1)
        tg_server.inject_message(OWNER_ID, "And buy milk")  # on time
        await tg_server.wait_sent(OWNER_ID, 2)
        turns = [t for t in await stack.turns(OWNER_KEY) if t["role"] == "user"]
    first, second = turns
    # when it was written is kept; the turn is dated when it came (the transcript's
    # order, the idle timer: bot.events.SENT_AT)
    assert first["metadata"]["sentAt"] == iso(written)
    assert first["timestamp"] > iso(written)
    assert first["content"] == "Remind me in 10 minutes to call mum"  # the owner's words
    assert second["metadata"]["sentAt"] <= second["timestamp"]
    label = (
        f"[Written {written:%A} {written.day} {written:%B %Y, %H:%M} (UTC); "
        "it reached you 20 h later.]"
    )
    asked = [last_user_text(r.body) for r in model.requests]
    assert f"{label} Remind me in 10 minutes to call mum" in asked
    assert "And buy milk" in asked[-1] and asked[-1].count("[Written") == 0
