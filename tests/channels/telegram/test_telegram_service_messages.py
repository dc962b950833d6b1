"""The chat's own notices (service messages) are never words someone said; odd content
(a game, a die, a custom emoji alone) gets a clear text."""

from __future__ import annotations

from typing import Any

import pytest
from aiogram.enums import ContentType

from bot.bench.fakes.telegram_api import FakeTelegramServer
from channels.telegram.service_messages import CONTENT_TYPES, SERVICE_TYPES

from .conftest import OWNER_ID, RecordingHost

pytestmark = pytest.mark.usefixtures("channel")

ALWAYS_GROUP = -100777  # respond: always (conftest): every message there is answered
MEMBER = {"id": 7, "is_bot": False, "first_name": "Bo"}
# Service messages of a newer Bot API than the first list: each came as
# "[checklist tasks done]" and the like, from the member who did it, and was answered.
NEWER_SERVICE_MESSAGES: list[dict[str, Any]] = [
    {"checklist_tasks_done": {"marked_as_done_task_ids": [1]}},
    {"checklist_tasks_added": {"tasks": [{"id": 2, "text": "eggs"}]}},
    {"poll_option_added": {"option_persistent_id": "a", "option_text": "Tacos"}},
    {"chat_owner_left": {}},
    {"chat_owner_changed": {"new_owner": MEMBER}},
    {"giveaway_created": {}},
    {"paid_message_price_changed": {"paid_message_star_count": 5}},
    {
        "successful_payment": {
            "currency": "XTR", "total_amount": 1, "invoice_payload": "p",
            "telegram_payment_charge_id": "c", "provider_payment_charge_id": "d",
        }
    },
]  # fmt: skip


async def test_newer_service_messages_in_a_group_are_not_words_nor_answered(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    for content in NEWER_SERVICE_MESSAGES:
        tg_server.inject_message(ALWAYS_GROUP, from_id=7, **content)
    tg_server.inject_message(ALWAYS_GROUP, "what's for dinner?", from_id=7)
    await host.wait_delivered(1)
    await host.wait_cursor(1000 + len(NEWER_SERVICE_MESSAGES) + 1)
    assert [m.text for m in host.delivered] == ["what's for dinner?"]


def test_every_content_type_aiogram_knows_is_either_said_or_a_service_message() -> None:
    # A newer aiogram brings new types: sorted here, not found answered in a group.
    known = {str(t.value) for t in ContentType}
    assert not SERVICE_TYPES & CONTENT_TYPES
    assert known - SERVICE_TYPES - CONTENT_TYPES == set()


async def test_a_game_a_die_and_a_custom_emoji_alone_get_a_clear_text(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    photo = [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}]
    tg_server.inject_message(OWNER_ID, game={"title": "Tetris", "description": "d", "photo": photo})
    tg_server.inject_message(OWNER_ID, dice={"emoji": "🎯", "value": 6})
    custom = {"type": "custom_emoji", "offset": 0, "length": 2, "custom_emoji_id": "5"}
    tg_server.inject_message(OWNER_ID, "😀", entities=[custom])
    await host.wait_delivered(3)
    # before, "[game]": the model could not tell which game "shall I play it?" meant
    assert [m.text for m in host.delivered] == ["[game: Tetris]", "[dice 🎯 6]", "😀"]


async def test_a_shape_aiogram_cannot_name_is_recorded_not_answered_in_an_always_group(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    # a notice of a Bot API newer than aiogram: before, a member "said" "[unknown]" and
    # the assistant answered it; in a private chat the owner sent something: answered
    tg_server.inject_message(ALWAYS_GROUP, from_id=7, chat_streak_extended={"days": 3})
    tg_server.inject_message(OWNER_ID, hologram={"id": "h"})
    await host.wait_delivered(2)
    group, private = host.delivered
    assert (group.text, group.addressed) == ("[unknown]", False)
    assert (private.text, private.addressed) == ("[unknown]", True)
