"""A stranger's edit of a message the owner was already told of, end to end (session 40:
within the hour's escalation limit it was silent, and the owner held, and answered, the
words the stranger had since changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.fakes.anthropic_script import last_user_text
from bot.bench.fakes.telegram_api import FakeTelegramServer
from bot.party_edits import EDIT_NOTICE_SECONDS

from .conftest import OWNER_ID, STRANGER_ID
from .stack import Stack, stack_with_model, start_stack, texts

pytestmark = pytest.mark.slow

STATION = "Meet me at the station at 5"
AIRPORT = "Meet me at the airport at 6"


async def test_the_owner_is_told_once_a_while_that_an_escalated_message_was_changed(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    first = tg_server.inject_message(STRANGER_ID, STATION, first_name="Mallory")
    await tg_server.wait_sent(OWNER_ID, 1)  # the escalation
    await tg_server.wait_sent(STRANGER_ID, 1)  # the acknowledgement
    party_id = (await stack.services.external.pending_escalations())[0]["partyId"]
    before = await stack.services.external.get(party_id)
    tg_server.inject_edit(first, AIRPORT)
    await tg_server.wait_sent(OWNER_ID, 2)
    notice = tg_server.sent_to(OWNER_ID)[1]
    assert notice["text"] == (
        f"Mallory (telegram user {STRANGER_ID}) changed their message (id {party_id}) to:\n"
        f"> \u201c{AIRPORT}\u201d\n/reply {party_id} <text> to answer yourself."
    )
    # Within EDIT_NOTICE_SECONDS a further edit is recorded, not sent; nor does an edit
    # get a second acknowledgement, nor restart the party's escalation interval.
    tg_server.inject_edit(first, "Meet me at the airport at 7")
    await stack.wait(lambda: stack.channel.offset >= 1004)
    party = await stack.services.external.get(party_id)
    assert party is not None and before is not None
    assert party.message_count == 3
    assert party.last_escalation == before.last_escalation
    assert len(tg_server.sent_to(OWNER_ID)) == 2
    assert len(tg_server.sent_to(STRANGER_ID)) == 1
    assert EDIT_NOTICE_SECONDS == 600


async def test_an_edit_of_a_message_never_escalated_gets_no_notice(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(STRANGER_ID, "Hello, it's about the flat", first_name="Mallory")
    await tg_server.wait_sent(OWNER_ID, 1)
    second = tg_server.inject_message(STRANGER_ID, STATION, first_name="Mallory")
    tg_server.inject_edit(second, AIRPORT)  # within the hour: the owner never saw it
    await stack.wait(lambda: stack.channel.offset >= 1004)

    async def sent_all() -> bool:
        return await stack.services.outbox.pending_count() == 0

    await stack.wait(sent_all)
    assert len(tg_server.sent_to(OWNER_ID)) == 1


async def test_the_owners_next_message_is_answered_with_the_changed_words(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    async with stack_with_model(tmp_path / "data", tg_server) as (_, model):
        first = tg_server.inject_message(STRANGER_ID, STATION, first_name="Mallory")
        await tg_server.wait_sent(OWNER_ID, 1)
        tg_server.inject_edit(first, AIRPORT)
        await tg_server.wait_sent(OWNER_ID, 2)
        tg_server.inject_message(OWNER_ID, "Tell them fine, I'll be there.")
        await tg_server.wait_sent(OWNER_ID, 3)
    [asked] = [last_user_text(r.body) for r in model.requests]
    # the escalation, then the notice of its change, before the owner's words
    assert asked.index(STATION) < asked.index(AIRPORT) < asked.index("Tell them fine")
    assert f"> \u201c{AIRPORT}\u201d" in asked
    assert "[edited" not in texts(tg_server.sent_to(OWNER_ID))[1]


async def test_an_edit_notice_counts_toward_the_hourly_budget_of_all_escalations(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    stack = await start_stack(tmp_path / "data", tg_server, trust={"escalations_per_hour": 1})
    try:
        first = tg_server.inject_message(STRANGER_ID, STATION, first_name="Mallory")
        await tg_server.wait_sent(OWNER_ID, 1)
        tg_server.inject_edit(first, AIRPORT)
        await tg_server.wait_sent(OWNER_ID, 2)
    finally:
        await stack.stop()
    held = tg_server.sent_to(OWNER_ID)[1]["text"]
    assert held.startswith("More strangers are writing than I pass on here")
    assert AIRPORT not in " ".join(texts(tg_server.sent_to(OWNER_ID)))
