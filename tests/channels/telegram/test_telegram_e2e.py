"""End to end: fake Bot API <-HTTP-> aiogram <- TelegramChannel -> real router, store,
reply engine and outbox (offline brain, or a scripted one where the exact reply matters)."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiogram.methods.base import Response
from aiogram.types import Message, Update

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.bench.fakes.telegram_api import ApiError, FakeTelegramServer
from bot.brain.base import BrainReply, BrainRequest, BrainUnavailable, DeltaSink
from bot.brain.offline import OFFLINE_LABEL
from bot.events import OutboundMessage
from bot.parties import party_handle
from bot.reply_generation import OUTAGE
from tests.conftest import settle

from .conftest import GROUP_ID, OWNER_ID, STRANGER_ID, assert_no_tasks_left
from .stack import ScriptedBrain, Stack, query_db, start_stack, texts

pytestmark = pytest.mark.slow

OWNER_KEY = f"telegram:{OWNER_ID}"


@pytest.fixture
async def scripted(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> AsyncIterator[tuple[Stack, ScriptedBrain]]:
    brain = ScriptedBrain()
    s = await start_stack(tmp_path / "data", tg_server, brain=brain)
    yield s, brain
    await s.stop()
    await assert_no_tasks_left()


async def test_owner_message_is_answered_in_the_pinned_conversation(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(OWNER_ID, "What did we decide about the garden?", username="olga")
    await tg_server.wait_sent(OWNER_ID, 1)
    reply = tg_server.sent_to(OWNER_ID)[0]
    assert reply["text"].startswith(OFFLINE_LABEL)
    assert tg_server.calls_of("sendChatAction")  # typing while the brain worked
    turns = await stack.turns(OWNER_KEY)
    assert [(t["role"], t["content"][:20]) for t in turns] == [
        ("user", "What did we decide a"), ("assistant", OFFLINE_LABEL[:20]),
    ]  # fmt: skip
    assert turns[0]["channel"] == "telegram"
    rec = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert rec is not None and rec.pinned and rec.channel == "telegram"

    # the @username alias reaches the same pinned conversation
    tg_server.inject_message(OWNER_ID, "and the roses?", username="olga")
    await tg_server.wait_sent(OWNER_ID, 2)
    assert len(await stack.turns(OWNER_KEY)) == 4


async def test_model_switch_then_new_pins_a_fresh_conversation_with_that_model(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(OWNER_ID, "first topic")
    await tg_server.wait_sent(OWNER_ID, 1)
    first = await stack.services.conversations.pinned_for(OWNER_KEY)
    tg_server.inject_message(OWNER_ID, "/model haiku")
    await tg_server.wait_sent(OWNER_ID, 2)
    assert tg_server.sent_to(OWNER_ID)[1]["text"].startswith("Model switched to haiku")
    assert (await stack.services.conversations.get(first.id)).model == "haiku"

    tg_server.inject_message(OWNER_ID, "/new")
    await tg_server.wait_sent(OWNER_ID, 3)
    # (the stack's brain is the offline one: it says haiku answers once a key is set)
    started = tg_server.sent_to(OWNER_ID)[2]["text"]
    assert started.startswith("Started a new conversation (model haiku once an API key is set;")
    fresh = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert fresh is not None and fresh.id != first.id and fresh.model == "haiku"
    assert (await stack.services.conversations.get(first.id)).pinned is False

    tg_server.inject_message(OWNER_ID, "second topic")
    await tg_server.wait_sent(OWNER_ID, 4)
    assert [t["content"] for t in await stack.turns(OWNER_KEY) if t["role"] == "user"] == [
        "second topic"
    ]


async def test_stranger_gets_an_acknowledgement_and_the_owner_buttons_that_work(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(STRANGER_ID, "Hi, is Olga around?", first_name="Mallory")
    await tg_server.wait_sent(STRANGER_ID, 1)
    await tg_server.wait_sent(OWNER_ID, 1)
    ack = tg_server.sent_to(STRANGER_ID)[0]["text"]
    assert ack == stack.config.trust.acknowledgement
    assert str(OWNER_ID) not in ack and "olga" not in ack.lower()
    escalation = tg_server.sent_to(OWNER_ID)[0]
    assert "Hi, is Olga around?" in escalation["text"]
    buttons = [b for row in escalation["reply_markup"]["inline_keyboard"] for b in row]
    assert [b["text"] for b in buttons] == ["Trust", "Block", "Reply"]
    party_id = buttons[0]["callback_data"].split()[1]
    assert await stack.services.conversations.pinned_for(f"telegram:{STRANGER_ID}") is None

    # Reply button -> ForceReply prompt -> the owner's answer reaches the stranger
    tg_server.inject_callback(OWNER_ID, buttons[2]["callback_data"], escalation)
    await tg_server.wait_sent(OWNER_ID, 2)
    prompt = tg_server.sent_to(OWNER_ID)[1]
    tg_server.inject_message(OWNER_ID, "She will call you back.", reply_to=prompt)
    await tg_server.wait_sent(STRANGER_ID, 2)
    assert tg_server.sent_to(STRANGER_ID)[1]["text"] == "She will call you back."

    # Trust button -> the party becomes known; offline no model answers them: their
    # message is recorded, and the owner (told of them just now) hears again once the
    # escalation interval is over (session 41: each got the offline notice, the owner
    # nothing)
    tg_server.inject_callback(OWNER_ID, buttons[0]["callback_data"], escalation)
    await stack.wait(lambda: any("is now known" in t for t in texts(tg_server.sent_to(OWNER_ID))))
    party = await stack.services.external.get(party_id)
    assert party is not None and party.tier == "known"
    assert len(tg_server.calls_of("answerCallbackQuery")) == 2
    tg_server.inject_message(STRANGER_ID, "Thanks! One more question.")

    async def refused() -> list[str]:
        lines = await stack.services.external.read_lines(party_id)
        return [e["reason"] for e in lines if e.get("event") == "refused"]

    for _ in range(200):
        if await refused():
            break
        await asyncio.sleep(0.05)
    assert await refused() == ["offline"]
    assert len(tg_server.sent_to(STRANGER_ID)) == 2


async def test_a_strangers_first_words_after_start_reach_the_owner(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    # Telegram's Start button sends "/start" before anyone types a word.
    tg_server.inject_message(STRANGER_ID, "/start", first_name="Mallory")
    await tg_server.wait_sent(OWNER_ID, 1)
    await tg_server.wait_sent(STRANGER_ID, 1)  # the acknowledgement
    tg_server.inject_message(STRANGER_ID, "It's about the flat on Elm Street.")
    tg_server.inject_message(STRANGER_ID, "Please call me.")
    # Before, the escalation (one per party an hour) was spent on "/start": the owner
    # read “/start” and never heard what they wanted.
    await tg_server.wait_sent(OWNER_ID, 2)
    await stack.wait(lambda: stack.channel.offset >= 1004)
    escalations = texts(tg_server.sent_to(OWNER_ID))
    assert "“/start”" in escalations[0]
    assert "Elm Street" in escalations[1]
    # then the rate limit holds again, and they were acknowledged once
    assert len(await stack.services.external.pending_escalations()) == 2

    # (the fake server has the message before the outbox marks its row sent)
    async def sent_all() -> bool:
        return await stack.services.outbox.pending_count() == 0

    await stack.wait(sent_all)
    await settle(stack.services)
    assert len(tg_server.sent_to(STRANGER_ID)) == 1


async def test_stranger_gets_silence_when_configured(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    s = await start_stack(tmp_path / "data", tg_server, trust={"acknowledgement": None})
    try:
        tg_server.inject_message(STRANGER_ID, "hello? who is this?")
        await tg_server.wait_sent(OWNER_ID, 1)
        await s.wait(lambda: s.channel.offset >= 1002)
    finally:
        await s.stop()
    assert tg_server.sent_to(STRANGER_ID) == []
    assert "hello? who is this?" in tg_server.sent_to(OWNER_ID)[0]["text"]


async def test_stranger_commands_only_touch_their_own_record(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    # both answered (at most one an interval otherwise: tests/test_escalation_flood.py)
    stack.services.config.trust.escalation_interval_seconds = 0
    tg_server.inject_message(OWNER_ID, "hello")
    await tg_server.wait_sent(OWNER_ID, 1)
    tg_server.inject_message(STRANGER_ID, "/model opus")
    tg_server.inject_message(STRANGER_ID, "/new")
    await tg_server.wait_sent(STRANGER_ID, 2)
    owner_conv = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert owner_conv is not None and owner_conv.model in (None, "sonnet")
    assert len(await stack.turns(OWNER_KEY)) == 2


async def test_group_mention_is_answered_and_other_messages_recorded(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(GROUP_ID, "dinner at 8?", from_id=STRANGER_ID, first_name="Tom")
    tg_server.inject_message(GROUP_ID, "@my_agent_bot what's on the list?", from_id=OWNER_ID,
                             first_name="Olga")  # fmt: skip
    await tg_server.wait_sent(GROUP_ID, 1)
    key = f"telegram:group:{GROUP_ID}"
    turns = await stack.turns(key)
    assert [(t["role"], t["content"][:12]) for t in turns] == [
        ("user", "dinner at 8?"), ("user", "@my_agent_bo"), ("assistant", OFFLINE_LABEL[:12]),
    ]  # fmt: skip
    assert turns[0]["sender"] == "Tom"
    assert len(tg_server.sent_to(GROUP_ID)) == 1  # the plain message got no reply
    # the answer is threaded under the message that asked
    group_send = [c for c in tg_server.calls_of("sendMessage") if c["chat_id"] == str(GROUP_ID)]
    assert group_send[0]["reply_parameters"]["message_id"] == 102
    # not on the allow-list: ignored entirely
    tg_server.inject_message(-100999, "@my_agent_bot hello?", from_id=OWNER_ID)
    await stack.wait(lambda: stack.channel.offset >= 1004)
    assert tg_server.sent_to(-100999) == []


async def test_flood_control_then_success(stack: Stack, tg_server: FakeTelegramServer) -> None:
    tg_server.fail_next("sendMessage", code=429, retry_after=2)
    tg_server.inject_message(OWNER_ID, "are you rate limited?")
    await tg_server.wait_sent(OWNER_ID, 1)
    assert stack.sleeps.delays == [2.0]
    assert len(tg_server.calls_of("sendMessage")) == 2


async def test_long_reply_arrives_in_ordered_parts(
    scripted: tuple[Stack, ScriptedBrain], tg_server: FakeTelegramServer
) -> None:
    _, brain = scripted
    long = "\n\n".join(f"Section {i}. " + "text " * 95 for i in range(25))[:10_000]
    brain.replies.append(long)
    tg_server.inject_message(OWNER_ID, "tell me everything")
    await tg_server.wait_sent(OWNER_ID, 3)
    parts = texts(tg_server.sent_to(OWNER_ID))
    assert len(parts) == 3 and all(len(p) <= 4096 for p in parts)
    assert " ".join(" ".join(parts).split()) == " ".join(long.split())


async def test_hostile_reply_is_delivered_escaped(
    scripted: tuple[Stack, ScriptedBrain], tg_server: FakeTelegramServer
) -> None:
    _, brain = scripted
    brain.replies.append("<script>alert(1)</script> <b>unclosed &amp; [x](javascript:alert(1))")
    tg_server.inject_message(OWNER_ID, "be evil")
    await tg_server.wait_sent(OWNER_ID, 1)
    sent = tg_server.sent_to(OWNER_ID)[0]
    assert sent["parse_mode"] == "HTML"
    assert sent["text"] == "<script>alert(1)</script> <b>unclosed &amp; [x](javascript:alert(1))"
    assert "<script>" not in sent["raw_text"]


async def test_restart_mid_stream_replays_nothing_and_skips_nothing(
    tmp_path: Path, tg_server: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    first = await start_stack(data, tg_server)
    for i in range(1, 7):
        tg_server.inject_message(OWNER_ID, f"message {i}")
    await first.wait(lambda: _user_turns(first, 2))
    await first.stop()  # mid-stream: some updates recorded, some not, replies in flight
    # Worst case for duplicates: the process died after recording but before the offset
    # was saved, so Telegram sends those updates again.
    state = first.config.state_path
    ((offset,),) = query_db(
        state, "SELECT value FROM channel_cursors WHERE channel='telegram' AND key='offset'"
    )
    query_db(state, "UPDATE channel_cursors SET value=? WHERE channel='telegram'",
             (str(int(offset) - 2),))  # fmt: skip
    tg_server.rewind(int(offset) - 2)
    caplog.set_level(logging.INFO, logger="my_agent.router")
    second = await start_stack(data, tg_server)
    try:
        await second.wait(lambda: _user_turns(second, 6))
        await second.wait(lambda: len(tg_server.sent_to(OWNER_ID)) >= 6)
        turns = await second.turns(OWNER_KEY)
    finally:
        await second.stop()
    users = [t["content"] for t in turns if t["role"] == "user"]
    assert users == [f"message {i}" for i in range(1, 7)]
    assert sum(1 for t in turns if t["role"] == "assistant") == 6
    assert len(tg_server.sent_to(OWNER_ID)) == 6
    dropped = [r for r in caplog.records if "duplicate telegram message" in r.getMessage()]
    assert len(dropped) == 2  # the re-sent updates reached the core and were dropped there


async def _user_turns(stack: Stack, n: int) -> bool:
    turns = await stack.turns(OWNER_KEY)
    return sum(1 for t in turns if t["role"] == "user") >= n


async def test_media_and_edits_are_recorded_with_placeholders_and_answered(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(
        OWNER_ID,
        document={"file_id": "d", "file_unique_id": "d", "file_name": "lease.pdf",
                  "mime_type": "application/pdf", "file_size": 4096},
        caption="can you keep this?",
    )  # fmt: skip
    await tg_server.wait_sent(OWNER_ID, 1)
    original = tg_server.inject_message(OWNER_ID, "meet at 5")
    await tg_server.wait_sent(OWNER_ID, 2)
    tg_server.inject_edit(original, "meet at 6")
    await tg_server.wait_sent(OWNER_ID, 3)
    turns = await stack.turns(OWNER_KEY)
    users = [t for t in turns if t["role"] == "user"]
    assert [t["content"] for t in users] == [
        "[document: lease.pdf, 4 KB] can you keep this?", "meet at 5",
        '[edited, before: "meet at 5"] meet at 6',
    ]  # fmt: skip
    assert users[2]["metadata"]["previous_text"] == "meet at 5"  # kept in the transcript
    attachment = users[0]["metadata"]["attachments"][0]
    assert attachment["kind"] == "document" and attachment["name"] == "lease.pdf"


async def test_response_models_survive_a_collection_between_messages(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    """Regression: aiogram's ``Response[Message]`` & co. were cached only weakly by
    pydantic, freed by each garbage collection and rebuilt (1-11 ms of the event loop) by
    the next call of that kind (channels/telegram/response_types.py)."""
    tg_server.inject_message(OWNER_ID, "note about the garden")
    await tg_server.wait_sent(OWNER_ID, 1)
    used = [weakref.ref(Response[t]) for t in (Message, bool, list[Update])]  # cache hits
    gc.collect()
    assert all(ref() is not None for ref in used)
    tg_server.inject_message(OWNER_ID, "and the roses?")
    await tg_server.wait_sent(OWNER_ID, 2)
    assert [Response[t] for t in (Message, bool, list[Update])] == [ref() for ref in used]


async def test_a_long_flood_wait_is_kept_by_the_outbox(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    # Longer than max_retry_after (60 s): the sender hands it back to the outbox, which
    # retried within a second or two (each retry another 429 that lengthens the ban).
    tg_server.fail_next("sendMessage", code=429, retry_after=100)
    tg_server.inject_message(OWNER_ID, "are you rate limited?")
    outbox = stack.services.outbox

    async def attempted() -> bool:
        row = await outbox.db.fetchone("SELECT attempts FROM outbox")
        return row is not None and row[0] == 1

    await stack.wait(attempted)
    row = await outbox.db.fetchone("SELECT next_attempt, status FROM outbox")
    assert row is not None and row[1] == "pending"
    assert row[0] - outbox.clock() >= 99
    assert len(tg_server.calls_of("sendMessage")) == 1
    later = outbox.clock() + 100
    outbox.clock = lambda: later  # the flood wait is over
    outbox.kick()
    await tg_server.wait_sent(OWNER_ID, 1)
    assert len(tg_server.calls_of("sendMessage")) == 2


class DownBrain(ScriptedBrain):
    """Unreachable until ``up`` is set (each call counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False
        self.calls = 0

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        self.calls += 1
        if not self.up:
            raise BrainUnavailable("overloaded (test)")
        return await super().reply(request, on_delta)


async def test_no_typing_after_the_owner_was_told_the_model_is_down(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    brain = DownBrain()
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain)
    stack.services.replies.retry_interval = 0.02
    try:
        tg_server.inject_message(OWNER_ID, "are you there?")
        await tg_server.wait_sent(OWNER_ID, 1)
        assert texts(tg_server.sent_to(OWNER_ID)) == [OUTAGE]
        told = brain.calls
        await stack.wait(lambda: brain.calls >= told + 3)  # still retrying
        # Before, every retry showed "typing…" again (refreshed for up to two minutes):
        # during an outage of hours the chat said "typing" nearly all the time.
        methods = [c.method.lower() for c in tg_server.calls]
        notice = methods.index("sendmessage")
        assert "sendchataction" in methods[:notice]
        assert "sendchataction" not in methods[notice:]
        brain.up = True
        await tg_server.wait_sent(OWNER_ID, 2)
        assert texts(tg_server.sent_to(OWNER_ID))[1] == "echo: are you there?"
    finally:
        await stack.stop()


async def test_search_results_show_the_words_as_they_were_written(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    said = "use *args and **kwargs, see __init__ and 2*3*4 or [docs](https://d.example)"
    tg_server.inject_message(OWNER_ID, said)
    await tg_server.wait_sent(OWNER_ID, 1)
    tg_server.inject_message(OWNER_ID, "/rename my_notes *draft*")
    tg_server.inject_message(OWNER_ID, "/search kwargs")
    await tg_server.wait_sent(OWNER_ID, 3)
    renamed, found = tg_server.sent_to(OWNER_ID)[1:]
    # A command's answer quotes stored text: before, it was read as Markdown, and the
    # snippet showed as "use args and **kwargs, see init and 23*4" in italics.
    assert renamed["text"] == "Renamed to: my_notes *draft*"
    assert said in found["text"] and "my_notes *draft*" in found["text"]
    assert "<i>" not in found["raw_text"] and "<a " not in found["raw_text"]


async def test_the_owners_start_button_shows_the_commands(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    # The first thing Telegram sends when the owner opens the bot; before, it was
    # answered "Unknown command /start".
    tg_server.inject_message(OWNER_ID, "/start")
    await tg_server.wait_sent(OWNER_ID, 1)
    answer = tg_server.sent_to(OWNER_ID)[0]["text"]
    assert "Unknown command" not in answer and "/search <query>" in answer


async def test_a_group_members_help_lists_only_what_they_may_use(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(GROUP_ID, "/help@my_agent_bot", from_id=STRANGER_ID)
    tg_server.inject_message(GROUP_ID, "/new@my_agent_bot", from_id=STRANGER_ID)
    await tg_server.wait_sent(GROUP_ID, 2)
    help_text, new_answer = texts(tg_server.sent_to(GROUP_ID))
    # Before, the help offered "/new - start over", which then answered "not available".
    assert "not available" in new_answer
    assert "/new" not in help_text and "/help" in help_text


async def test_the_offline_brains_recall_shows_the_words_as_they_were_written(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    said = "use *args and **kwargs, see __init__ and 2*3*4"
    tg_server.inject_message(OWNER_ID, said)
    await tg_server.wait_sent(OWNER_ID, 1)
    tg_server.inject_message(OWNER_ID, "/new what about kwargs?")  # recalls past ones
    await tg_server.wait_sent(OWNER_ID, 3)
    listing = tg_server.sent_to(OWNER_ID)[2]
    # A readout quotes stored text: before, it was read as Markdown ("*args and **" in
    # italics, the asterisks gone).
    assert said in listing["text"]
    assert "<i>" not in listing["raw_text"] and "<b>" not in listing["raw_text"]


async def test_a_command_under_the_reply_prompt_runs_and_never_reaches_the_party(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    # Regression (session 40): Telegram keeps the prompt's reply header on the owner's
    # next message; "/block p..." typed there went to the stranger as the owner's answer
    # ("Sent to Mallory"), their id and the owner's intent with it, and nothing was
    # blocked.
    tg_server.inject_message(STRANGER_ID, "Have you got the floor plan?", first_name="Mallory")
    await tg_server.wait_sent(OWNER_ID, 1)
    escalation = tg_server.sent_to(OWNER_ID)[0]
    reply_button = escalation["reply_markup"]["inline_keyboard"][0][2]["callback_data"]
    party = reply_button.split()[-1]
    tg_server.inject_callback(OWNER_ID, reply_button, escalation)
    await tg_server.wait_sent(OWNER_ID, 2)
    prompt = tg_server.sent_to(OWNER_ID)[1]
    tg_server.inject_message(OWNER_ID, f"/block {party}", reply_to=prompt)
    await tg_server.wait_sent(OWNER_ID, 3)
    assert "is blocked" in tg_server.sent_to(OWNER_ID)[2]["text"]
    await settle(stack.services)
    assert len(tg_server.sent_to(STRANGER_ID)) == 1  # the acknowledgement alone
    record = await stack.services.external.get(party)
    assert record is not None and record.tier == "blocked"


PHOTO = [{"file_id": "p", "file_unique_id": "p", "width": 640, "height": 480}]


async def test_a_photo_answering_the_reply_prompt_goes_where_the_prompt_says(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(STRANGER_ID, "Have you got the floor plan?", first_name="Mallory")
    await tg_server.wait_sent(OWNER_ID, 1)
    escalation = tg_server.sent_to(OWNER_ID)[0]
    reply_button = escalation["reply_markup"]["inline_keyboard"][0][2]["callback_data"]
    tg_server.inject_callback(OWNER_ID, reply_button, escalation)
    await tg_server.wait_sent(OWNER_ID, 2)
    prompt = tg_server.sent_to(OWNER_ID)[1]
    # Before, a photo (or any file) answering the prompt went to the assistant as
    # "[replying to your message: …] [photo] …", and Mallory heard nothing; then only
    # the words went on, the photo dropped.
    tg_server.inject_message(OWNER_ID, reply_to=prompt, photo=PHOTO, caption="Plan attached.")
    await tg_server.wait_sent(STRANGER_ID, 3)  # the acknowledgement, the words, the photo
    words, photo = tg_server.sent_to(STRANGER_ID)[1:3]
    assert words["text"] == "Plan attached."
    assert photo["photo"][0]["file_id"] == "p"  # sent on by its file_id: nothing downloaded
    await tg_server.wait_sent(OWNER_ID, 3)
    told = tg_server.sent_to(OWNER_ID)[2]["text"]
    assert told == "Sent to Mallory (telegram): your words and photo."
    # a photo alone, and a document, go on too
    tg_server.inject_message(OWNER_ID, reply_to=prompt, photo=PHOTO)
    await tg_server.wait_sent(OWNER_ID, 4)
    assert tg_server.sent_to(OWNER_ID)[3]["text"] == "Sent to Mallory (telegram): your photo."
    doc = {"file_id": "d1", "file_unique_id": "d1", "file_name": "plan.pdf"}
    tg_server.inject_message(OWNER_ID, reply_to=prompt, document=doc)
    await tg_server.wait_sent(STRANGER_ID, 5)
    assert tg_server.sent_to(STRANGER_ID)[4]["document"]["file_id"] == "d1"
    await tg_server.wait_sent(OWNER_ID, 5)
    assert "plan.pdf" in tg_server.sent_to(OWNER_ID)[4]["text"]
    # what cannot go on is said, with why; without words nothing is sent
    sticker = {"file_id": "s", "file_unique_id": "s", "width": 9, "height": 9,
               "is_animated": False, "is_video": False, "type": "regular"}  # fmt: skip
    tg_server.inject_message(OWNER_ID, reply_to=prompt, sticker=sticker)
    await tg_server.wait_sent(OWNER_ID, 6)
    told = tg_server.sent_to(OWNER_ID)[5]["text"]
    assert told.startswith("Nothing sent to Mallory") and "photos and documents only" in told
    assert len(tg_server.sent_to(STRANGER_ID)) == 5
    # none of it reached the assistant; the owner's conversation keeps what came
    rec = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert rec is not None
    lines = stack.services.store.read_lines(rec.id)
    assert [ln for ln in lines if ln.get("type") == "turn"] == []
    commands = [ln for ln in lines if ln.get("event") == "command"]
    kinds = [c["metadata"]["attachments"][0]["kind"] for c in commands[-4:]]
    assert kinds == ["photo", "photo", "document", "sticker"]


async def test_a_message_edited_into_a_command_runs_it_once(
    scripted: tuple[Stack, ScriptedBrain], tg_server: FakeTelegramServer
) -> None:
    stack, brain = scripted
    original = tg_server.inject_message(OWNER_ID, "/model opsu")  # a typo
    await tg_server.wait_sent(OWNER_ID, 1)
    edited = tg_server.inject_edit(original, "/model opus")
    await tg_server.wait_sent(OWNER_ID, 2)
    # Before, the edit reached the model as "[edited] /model opus" and nothing switched.
    assert tg_server.sent_to(OWNER_ID)[1]["text"].startswith("Model switched to opus")
    rec = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert rec is not None and rec.model == "opus"
    # Telegram sends the edit again (its confirmation was lost): it is not run twice
    redelivered = tg_server.push_update("edited_message", edited)
    await stack.wait(lambda: stack.channel.offset > redelivered)
    tg_server.inject_message(OWNER_ID, "thanks")
    await tg_server.wait_sent(OWNER_ID, 3)
    assert texts(tg_server.sent_to(OWNER_ID))[2] == "echo: thanks"
    assert [r.text for r in brain.requests] == ["thanks"]  # no command reached the model
    turns = await stack.turns(OWNER_KEY)
    assert [t["content"] for t in turns if t["role"] == "user"] == ["thanks"]


async def test_two_edits_within_one_second_are_both_kept(
    scripted: tuple[Stack, ScriptedBrain], tg_server: FakeTelegramServer
) -> None:
    # Regression: an edit's id carried only its date in seconds; a second edit made
    # within the same second (a typo fixed twice) had the first one's id and the core
    # dropped it as a duplicate: the owner's final words were lost.
    stack, _ = scripted
    original = tg_server.inject_message(OWNER_ID, "meet at 5")
    await tg_server.wait_sent(OWNER_ID, 1)
    first = tg_server.inject_edit(original, "meet at 6")
    tg_server.push_update("edited_message", dict(first, text="meet at 7"))
    again = tg_server.push_update("edited_message", first)  # a redelivery: no third
    await stack.wait(lambda: stack.channel.offset > again)
    await settle(stack.services)
    turns = await stack.turns(OWNER_KEY)
    said = [t["content"] for t in turns if t["role"] == "user"]
    assert said == [
        "meet at 5",
        '[edited, before: "meet at 5"] meet at 6',
        '[edited, before: "meet at 6"] meet at 7',
    ]


async def test_an_albums_captions_all_reach_its_one_reply(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    def photo(n: int) -> list[dict[str, object]]:
        return [{"file_id": f"p{n}", "file_unique_id": f"p{n}", "width": 9, "height": 9}]

    async with FakeAnthropicAPI(fallback="echo") as model:
        brain = {"provider": "anthropic", "base_url": model.base_url, "api_key": "test-key"}
        stack = await start_stack(tmp_path / "data", tg_server, brain_config=brain)
        try:
            for n, caption in enumerate(("our trip", "the beach at dawn", "the hotel"), 1):
                tg_server.inject_message(OWNER_ID, photo=photo(n), caption=caption,
                                         media_group_id="a1")  # fmt: skip
            await tg_server.wait_sent(OWNER_ID, 1)
            # in a group, the album that mentions the bot on its first photo
            tg_server.inject_message(GROUP_ID, photo=photo(4), caption="@my_agent_bot where?",
                                     media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
            tg_server.inject_message(GROUP_ID, photo=photo(5), caption="the second beach",
                                     media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
            await tg_server.wait_sent(GROUP_ID, 1)
            tg_server.inject_message(OWNER_ID, "nice, right?")
            await tg_server.wait_sent(OWNER_ID, 2)
            await stack.wait(lambda: len(model.requests) >= 3)
        finally:
            await stack.stop()
    # One reply per album, and its request holds every caption: before, the captions of
    # the second and third photo reached only the reply to the next message.
    assert len(tg_server.sent_to(OWNER_ID)) == 2 and len(tg_server.sent_to(GROUP_ID)) == 1
    album, group, _ = (r.text for r in model.requests)
    assert all(c in album for c in ("our trip", "the beach at dawn", "the hotel"))
    assert "where?" in group and "the second beach" in group


async def test_a_strangers_album_is_acknowledged_once(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    photo = [{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}]
    tg_server.inject_message(STRANGER_ID, photo=photo, caption="my flat", media_group_id="s1")
    tg_server.inject_message(STRANGER_ID, photo=photo, caption="the kitchen", media_group_id="s1")
    # The escalation goes out before the acknowledgement is queued (an escalation
    # first, so a crash between the two cannot hide it): wait for both, then for the
    # outbox to be empty, before counting (the outbox could be empty in between).
    await tg_server.wait_sent(OWNER_ID, 1)
    await tg_server.wait_sent(STRANGER_ID, 1)
    await stack.wait(lambda: stack.channel.offset >= 1003)

    async def sent_all() -> bool:
        return await stack.services.outbox.pending_count() == 0

    await stack.wait(sent_all)
    await settle(stack.services)
    assert len(tg_server.sent_to(STRANGER_ID)) == 1
    # one escalation, then its photos, sent on by file id (session 40)
    escalation, *photos = tg_server.sent_to(OWNER_ID)
    assert "Their 2 photos follow." in escalation["text"]
    assert [m["photo"][0]["file_id"] for m in photos] == ["p", "p"]


class StuckBrain(ScriptedBrain):
    """A brain that never answers (until cancelled): a reply in flight at the stop."""

    def __init__(self) -> None:
        super().__init__()
        self.called = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        self.requests.append(request)
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_the_stack_stops_with_a_reply_in_flight_and_leaves_no_task(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    brain = StuckBrain()
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain)
    try:
        tg_server.inject_message(OWNER_ID, "think hard")
        await asyncio.wait_for(brain.called.wait(), 15)
    finally:
        await stack.stop()
    # Before, the stack stopped its channel, then its services, like no daemon does: the
    # reply worker, stuck in the brain, outlived the test (and the fake server under it).
    await assert_no_tasks_left()


async def test_a_known_partys_album_gets_one_answer_with_the_history_as_it_came(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    def photo(n: int) -> list[dict[str, object]]:
        return [{"file_id": f"k{n}", "file_unique_id": f"k{n}", "width": 9, "height": 9}]

    brain = GatedScriptedBrain()
    trust = {"contacts": {"telegram": {str(STRANGER_ID): "known"}}}
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain, trust=trust)
    try:
        tg_server.inject_message(STRANGER_ID, "hello, it's Kim", first_name="Kim")
        for n, caption in enumerate(("my flat", "the kitchen", "the garden"), 1):
            tg_server.inject_message(STRANGER_ID, photo=photo(n), caption=caption,
                                     media_group_id="k1", first_name="Kim")  # fmt: skip
        tg_server.inject_message(STRANGER_ID, "so, what do you think?", first_name="Kim")
        # Everything is recorded while the answer to "hello" is still being written.
        party_id = party_handle("telegram", str(STRANGER_ID))
        await stack.wait(lambda: _count(stack.services.external.messages(party_id), 5))
        brain.release.set()
        await tg_server.wait_sent(STRANGER_ID, 3)
        await asyncio.sleep(0.3)  # would another answer (or an escalation) still come?
    finally:
        await stack.stop()
    # One answer to the album, with every caption, then one to the next message. Before,
    # the album's first photo was answered with its caption only (the other captions
    # never reached the model), given the party's exchange as of when the answer ran:
    # the later photos and "so, what do you think?" in it, as if said before the photo.
    assert len(tg_server.sent_to(STRANGER_ID)) == 3
    _hello, album, after = brain.requests
    assert album.text == "[photo] my flat\n[photo] the kitchen\n[photo] the garden"
    assert [h.content for h in album.history] == ["hello, it's Kim", "echo: hello, it's Kim"]
    assert after.text == "so, what do you think?"
    said = [h.content for h in after.history]  # in the order recorded
    assert sorted(said) == sorted(
        ["hello, it's Kim", "echo: hello, it's Kim", *album.text.split("\n"),
         f"echo: {album.text}"]
    )  # fmt: skip
    assert said[-1] == f"echo: {album.text}"
    # A known party's album photos are not "unaddressed" mail to escalate to the owner
    # (the owner was told "Message from Kim, not a known contact").
    assert tg_server.sent_to(OWNER_ID) == []


async def test_a_known_partys_answer_is_given_their_exchange_as_of_the_message(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    brain = GatedScriptedBrain()
    trust = {"contacts": {"telegram": {str(STRANGER_ID): "known"}}}
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain, trust=trust)
    try:
        for text in ("one", "two", "three"):
            tg_server.inject_message(STRANGER_ID, text, first_name="Kim")
        party_id = party_handle("telegram", str(STRANGER_ID))
        await stack.wait(lambda: _count(stack.services.external.messages(party_id), 3))
        brain.release.set()  # "two" and "three" came while "one" was being answered
        await tg_server.wait_sent(STRANGER_ID, 3)
    finally:
        await stack.stop()
    # Before, "two" was given what the party had sent when its answer ran: "two" itself
    # and "three", as if said before it.
    one, two, three = ([h.content for h in r.history] for r in brain.requests)
    assert one == [] and two == ["one", "echo: one"]
    assert three == ["one", "two", "echo: one", "echo: two"]  # in the order recorded


class GatedScriptedBrain(ScriptedBrain):
    """A scripted brain whose first answer waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        await self.release.wait()
        return await super().reply(request, on_delta)


async def _count(messages: Any, n: int) -> bool:
    return len(await messages) >= n


async def test_a_long_reply_cut_off_by_a_restart_resumes_without_repeating_its_parts(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    # Regression: the parts of a long reply already delivered were remembered in memory
    # only. Its second part met a long flood wait (back to the outbox), the daemon
    # restarted, and the owner got the first part twice.
    words = [f"w{n:05d}" for n in range(1800)]  # four parts
    brain = ScriptedBrain()
    brain.replies.append(" ".join(words))
    sends = 0
    send_message = tg_server._send_message

    def second_is_flood_limited(params: dict[str, Any]) -> dict[str, Any]:
        nonlocal sends
        sends += 1
        if sends == 2:
            raise ApiError(429, "Too Many Requests: retry after 30", retry_after=30)
        return send_message(params)

    tg_server._send_message = second_is_flood_limited  # type: ignore[method-assign]
    telegram = {"max_retry_after": 1}  # the outbox waits the 30 s out
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain, telegram=telegram)
    try:
        tg_server.inject_message(OWNER_ID, "the long version, please")
        await tg_server.wait_sent(OWNER_ID, 1)
        await stack.wait(lambda: _outbox_attempts(stack) == [1])  # back in the outbox
    finally:
        await stack.stop()
    assert len(tg_server.sent_to(OWNER_ID)) == 1
    query_db(stack.config.state_path, "UPDATE outbox SET next_attempt = 0")  # wait over
    stack = await start_stack(tmp_path / "data", tg_server, brain=brain, telegram=telegram)
    try:
        await tg_server.wait_sent(OWNER_ID, 4)
        await asyncio.sleep(0.5)  # nothing more comes
    finally:
        await stack.stop()
    sent = texts(tg_server.sent_to(OWNER_ID))
    assert len(sent) == 4 and " ".join(sent).split() == words


def _outbox_attempts(stack: Stack) -> list[int]:
    # while the stack runs: the daemon's driver (query_db), never the standard sqlite3
    return [n for (n,) in query_db(stack.config.state_path, "SELECT attempts FROM outbox")]


async def test_what_is_said_in_a_forum_topic_is_answered_in_that_topic(
    scripted: tuple[Stack, ScriptedBrain], tg_server: FakeTelegramServer
) -> None:
    _, brain = scripted
    brain.replies.append("\n\n".join(f"Part {i}. " + "word " * 300 for i in range(4)))
    topic = {"message_thread_id": 7, "is_topic_message": True}
    tg_server.inject_message(GROUP_ID, "@my_agent_bot plan the trip", from_id=OWNER_ID, **topic)
    await tg_server.wait_sent(GROUP_ID, 2)
    tg_server.inject_message(GROUP_ID, "/help@my_agent_bot", from_id=OWNER_ID, **topic)
    await tg_server.wait_sent(GROUP_ID, 3)
    sends = [c for c in tg_server.calls_of("sendMessage") if c["chat_id"] == str(GROUP_ID)]
    # Every part of the long reply and the command's answer go to the topic they answer;
    # before, only the first part (threaded under the question) landed there, and the
    # rest, like every command answer, in the group's general topic.
    assert len(sends) == 3
    assert [c.get("message_thread_id") for c in sends] == ["7", "7", "7"]
    typing = [c for c in tg_server.calls_of("sendChatAction") if c["chat_id"] == str(GROUP_ID)]
    assert typing and all(c.get("message_thread_id") == "7" for c in typing)
    # a message outside any topic is answered outside any (no thread id sent)
    tg_server.inject_message(GROUP_ID, "/help@my_agent_bot", from_id=OWNER_ID)
    await tg_server.wait_sent(GROUP_ID, 4)
    last = [c for c in tg_server.calls_of("sendMessage") if c["chat_id"] == str(GROUP_ID)][-1]
    assert "message_thread_id" not in last


async def test_another_bots_command_in_the_owners_chat_is_not_run(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    tg_server.inject_message(OWNER_ID, "/model@other_bot opus")
    tg_server.inject_message(OWNER_ID, "/model@my_agent_bot haiku")
    await tg_server.wait_sent(OWNER_ID, 1)
    # Before, the other bot's /model was run here too (two answers, the model opus first).
    await stack.wait(lambda: stack.channel.offset > 1002)
    await asyncio.sleep(0.3)
    answers = [m["text"] for m in tg_server.sent_to(OWNER_ID)]
    assert len(answers) == 1 and answers[0].startswith("Model switched to haiku")
    rec = await stack.services.conversations.pinned_for(OWNER_KEY)
    assert rec is not None and rec.model == "haiku"


async def test_a_group_upgraded_to_a_supergroup_keeps_its_conversation_and_answers(
    stack: Stack, tg_server: FakeTelegramServer
) -> None:
    upgraded = -1009990003
    key = f"telegram:group:{GROUP_ID}"
    tg_server.inject_message(GROUP_ID, "@my_agent_bot first question", from_id=OWNER_ID)
    await tg_server.wait_sent(GROUP_ID, 1)
    before = await stack.services.conversations.pinned_for(key)
    # Telegram upgrades the group: the old id refuses sends from now on
    tg_server.migrated_chats[GROUP_ID] = upgraded
    tg_server.inject_message(GROUP_ID, migrate_to_chat_id=upgraded, from_id=OWNER_ID)
    tg_server.inject_message(upgraded, migrate_from_chat_id=GROUP_ID, from_id=OWNER_ID)
    # (the owner's: offline, a member's message is recorded, not answered)
    tg_server.inject_message(upgraded, "@my_agent_bot second question", from_id=OWNER_ID)
    await tg_server.wait_sent(upgraded, 1)
    # a reply the conversation still addresses to the old id (a resumed one, a /status)
    await stack.channel.send(OutboundMessage("telegram", str(GROUP_ID), "to the old id"))
    after = await stack.services.conversations.pinned_for(key)
    assert before is not None and after is not None and after.id == before.id
    turns = await stack.turns(key)
    assert [t["content"] for t in turns if t["role"] == "user"] == [
        "@my_agent_bot first question", "@my_agent_bot second question"
    ]  # fmt: skip
    assert after.channel_meta.get("chatId") == str(upgraded)
    assert len(tg_server.sent_to(upgraded)) == 2
    # once followed, no send asks the old id again
    assert [c["chat_id"] for c in tg_server.calls_of("sendMessage")].count(str(GROUP_ID)) == 1


@pytest.mark.parametrize(
    ("chat", "refusal"),
    [(GROUP_ID, "kicked"), (GROUP_ID, "missing")],
)
async def test_a_reply_telegram_refuses_for_good_is_not_retried_and_the_owner_is_told(
    stack: Stack, tg_server: FakeTelegramServer, chat: int, refusal: str
) -> None:
    {"kicked": tg_server.kicked_chats, "missing": tg_server.missing_chats}[refusal].add(chat)
    tg_server.inject_message(chat, "@my_agent_bot are you there?", from_id=OWNER_ID)
    await tg_server.wait_sent(OWNER_ID, 1)  # the owner's alert
    outbox = stack.services.outbox
    row = await outbox.db.fetchone("SELECT status, attempts, last_error FROM outbox")
    assert row is not None and row[0] == "failed" and row[1] == 1
    alert = tg_server.sent_to(OWNER_ID)[0]["text"]
    assert alert.startswith("Could not deliver a reply on telegram") and "keeps it" in alert
    turns = await stack.turns(f"telegram:group:{GROUP_ID}")
    assert [t["role"] for t in turns] == ["user", "assistant"]  # the reply stays
    await asyncio.sleep(0.3)
    tries = [c for c in tg_server.calls_of("sendMessage") if c["chat_id"] == str(chat)]
    assert len(tries) == 1  # never retried


async def test_an_album_cut_by_a_restart_gets_one_reply_to_its_last_photo(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    photo = [{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}]
    first = await start_stack(tmp_path / "data", tg_server, brain=ScriptedBrain())
    try:
        tg_server.inject_message(GROUP_ID, photo=photo, caption="@my_agent_bot where?",
                                 media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
        await first.wait(lambda: first.channel.offset > 1001)
    finally:
        await first.stop(drain_seconds=0)  # its reply is owed: resumed at the next start
    assert tg_server.sent_to(GROUP_ID) == []
    second = await start_stack(tmp_path / "data", tg_server, brain=ScriptedBrain())
    try:
        tg_server.inject_message(GROUP_ID, photo=photo, caption="the second beach",
                                 media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
        await tg_server.wait_sent(GROUP_ID, 1)
        await asyncio.sleep(1.5)  # no second reply comes
        turns = await second.turns(f"telegram:group:{GROUP_ID}")
    finally:
        await second.stop()
    # Before, the second photo was recorded as not addressed and the reply answered the
    # first photo alone.
    assert texts(tg_server.sent_to(GROUP_ID)) == ["echo: [photo] the second beach"]
    assert [t.get("awaitReply") for t in turns if t["role"] == "user"] == [None, None]
