"""The adapter against the fake Bot API server over HTTP, with a recording ChannelHost."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time

import pytest

from bot.bench.fakes.telegram_api import TOKEN, ApiError, FakeTelegramServer
from bot.channel import PermanentSendError
from bot.events import OutboundMessage
from channels.telegram.adapter import TelegramChannel

from .conftest import (
    GROUP_ID,
    OTHER_GROUP_ID,
    OWNER_ID,
    STRANGER_ID,
    RecordingHost,
    SleepRecorder,
    fail_sends,
    telegram_config,
)


async def test_start_registers_without_dropping_pending_updates(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    hook = tg_server.calls_of("deleteWebhook")
    assert hook == [{"drop_pending_updates": "false"}]
    menus = {
        str(c.get("scope", {"type": "default"})): [x["command"] for x in c["commands"]]
        for c in tg_server.calls_of("setMyCommands")
    }
    # The owner's chat has every command; before, everyone's menu offered /trust,
    # /block, /reply and /search, which a stranger or group member cannot use.
    assert menus == {
        str({"type": "chat", "chat_id": OWNER_ID}): ["new", "model", "help", "status",
                                                      "rename", "search", "trust", "block",
                                                      "reply", "replyall"],
        str({"type": "default"}): ["new", "help"],
        str({"type": "all_group_chats"}): ["help"],
    }  # fmt: skip
    assert channel.me is not None and channel.me.username == "my_agent_bot"


async def test_an_owner_who_never_wrote_to_the_bot_does_not_stop_it(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    tg_server.missing_chats.add(OWNER_ID)  # a new bot: the owner has not pressed Start
    ch = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=sleeps)
    await ch.start(host)
    try:
        assert ch.started  # polling runs, so the owner's first message is heard
        tg_server.missing_chats.discard(OWNER_ID)
        tg_server.inject_message(OWNER_ID, "/start")
        await host.wait_delivered(1)
        await tg_server.wait_for("setMyCommands", 4)
    finally:
        await ch.stop()
    menus = [c.get("scope", {}).get("type") for c in tg_server.calls_of("setMyCommands")]
    assert menus == ["chat", None, "all_group_chats", "chat"]  # the owner's menu, now


async def test_an_owner_known_only_by_username_keeps_the_full_menu(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    cfg = telegram_config(tg_server.base_url)
    cfg.owner.identities["telegram"] = ["@olga"]  # no chat to give the owner's menu to
    ch = TelegramChannel(cfg, None, sleep=sleeps)
    await ch.start(host)
    await ch.stop()
    (call,) = tg_server.calls_of("setMyCommands")
    assert "scope" not in call and len(call["commands"]) == 10


async def test_private_text_is_delivered_then_acknowledged(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    msg = tg_server.inject_message(OWNER_ID, "hello there", username="Owner", first_name="Olga")
    await host.wait_delivered(1)
    got = host.delivered[0]
    assert got.channel == "telegram" and got.text == "hello there"
    assert got.sender_id == str(OWNER_ID) and got.sender_aliases == ("@Owner",)
    assert got.sender_name == "Olga" and got.chat_id == str(OWNER_ID)
    assert got.message_id == f"{OWNER_ID}:{msg['message_id']}"
    assert got.group_id is None and got.addressed
    update_id = 1001
    await host.wait_cursor(update_id + 1)
    # the next poll confirms the update to Telegram
    await tg_server.wait_for("getUpdates", len(tg_server.calls_of("getUpdates")) + 1)
    assert tg_server.pending_updates == []


async def test_offset_not_advanced_until_durable(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    refusals = 0

    def refuse(m: object) -> bool:
        nonlocal refusals
        refusals += 1
        return refusals <= 2  # the first two delivery attempts fail (disk full)

    host.refuse = refuse  # type: ignore[assignment]
    tg_server.inject_message(OWNER_ID, "one")
    tg_server.inject_message(OWNER_ID, "two")
    await host.wait_delivered(2, timeout=20)
    assert [m.text for m in host.delivered] == ["one", "two"]
    assert host.cursor_history == ["1002", "1003"]
    assert refusals == 4


async def test_restart_mid_stream_replays_nothing_and_skips_nothing(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    cfg = telegram_config(tg_server.base_url)
    first = TelegramChannel(cfg, None, sleep=sleeps)
    host.refuse = lambda m: m.text == "m3"  # "crash" while m3 is being recorded
    await first.start(host)
    for i in range(1, 6):
        tg_server.inject_message(OWNER_ID, f"m{i}")
    await host.wait_delivered(2)
    await first.stop()
    assert [m.text for m in host.delivered] == ["m1", "m2"]
    assert host.cursors[("telegram", "offset")] == "1003"

    host.refuse = lambda m: False
    second = TelegramChannel(cfg, None, sleep=sleeps)
    await second.start(host)
    try:
        await host.wait_delivered(5)
        tg_server.inject_message(OWNER_ID, "m6")
        await host.wait_delivered(6)
    finally:
        await second.stop()
    assert [m.text for m in host.delivered] == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert len({m.message_id for m in host.delivered}) == 6
    first_poll_after_restart = [
        c for c in tg_server.calls_of("getUpdates") if c.get("offset") == "1003"
    ]
    assert first_poll_after_restart


async def test_groups_allow_list_mentions_and_replies(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    tg_server.inject_message(OTHER_GROUP_ID, "not allowed", from_id=OWNER_ID)
    tg_server.inject_message(GROUP_ID, "just chatting", from_id=STRANGER_ID, title="Family")
    tg_server.inject_message(GROUP_ID, "@my_agent_bot what time is it?", from_id=STRANGER_ID)
    tg_server.inject_message(GROUP_ID, "/status@my_agent_bot", from_id=OWNER_ID)
    tg_server.inject_message(GROUP_ID, "/status@other_bot", from_id=OWNER_ID)
    tg_server.inject_message(-100777, "always answered", from_id=STRANGER_ID)
    await host.wait_delivered(5)
    await host.wait_cursor(1007)
    by_text = {m.text: m for m in host.delivered}
    assert "not allowed" not in by_text
    chat = by_text["just chatting"]
    assert chat.group_id == str(GROUP_ID) and chat.group_title == "Family"
    assert chat.addressed is False and chat.sender_id == str(STRANGER_ID)
    assert by_text["@my_agent_bot what time is it?"].addressed is True
    assert by_text["/status"].addressed is True  # @ourbot suffix stripped
    assert by_text["/status@other_bot"].addressed is False
    assert by_text["always answered"].addressed is True

    # a reply to one of the bot's own messages addresses it too
    sent = await channel.send(OutboundMessage("telegram", str(GROUP_ID), "Noon."))
    bot_msg = tg_server.sent[-1]
    assert sent.message_ref == f"{GROUP_ID}:{bot_msg['message_id']}"
    tg_server.inject_message(GROUP_ID, "thanks", from_id=STRANGER_ID, reply_to=bot_msg)
    await host.wait_delivered(6)
    assert host.delivered[-1].addressed is True


async def test_an_allowed_group_upgraded_to_a_supergroup_stays_allowed(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    upgraded = -1009990001  # Telegram moved the Family group to a new id
    cfg = telegram_config(tg_server.base_url)
    first = TelegramChannel(cfg, None, sleep=sleeps)
    await first.start(host)
    try:
        tg_server.inject_message(GROUP_ID, migrate_to_chat_id=upgraded, from_id=OWNER_ID)
        tg_server.inject_message(upgraded, migrate_from_chat_id=GROUP_ID, from_id=OWNER_ID)
        tg_server.inject_message(upgraded, "@my_agent_bot still there?", from_id=OWNER_ID)
        await host.wait_delivered(1)
    finally:
        await first.stop()
    second = TelegramChannel(cfg, None, sleep=sleeps)  # and after a restart
    await second.start(host)
    try:
        tg_server.inject_message(upgraded, "@my_agent_bot and now?", from_id=STRANGER_ID)
        await host.wait_delivered(2)
    finally:
        await second.stop()
    # Before, the new id was not on the allow-list: the bot went silent in the group.
    # The conversation stays the group's (its configured id); answers go to the new chat.
    assert [(m.text, m.group_id, m.chat_id, m.addressed) for m in host.delivered] == [
        ("@my_agent_bot still there?", str(GROUP_ID), str(upgraded), True),
        ("@my_agent_bot and now?", str(GROUP_ID), str(upgraded), True),
    ]


async def test_an_anonymous_admin_can_address_the_bot(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    family = {"id": GROUP_ID, "type": "supergroup", "title": "Family"}
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group",
                 "username": "GroupAnonymousBot"}  # fmt: skip
    other_bot = {"id": 555, "is_bot": True, "first_name": "Echo", "username": "echo_bot"}
    tg_server.inject_message(
        GROUP_ID, "@my_agent_bot what's for dinner?", sender_chat=family, **{"from": anonymous}
    )
    tg_server.inject_message(GROUP_ID, "@my_agent_bot echo!", **{"from": other_bot})
    await host.wait_delivered(2)
    # An admin who remains anonymous writes as the group itself (Telegram's
    # GroupAnonymousBot): before, that was taken for a bot and never answered.
    asked, echoed = host.delivered
    # Named so, not by the group's title (which its admins choose): any of them wrote it
    # (the core never takes it for the owner's: tests/channels/telegram/test_telegram_trust.py).
    assert (asked.sender_id, asked.sender_name, asked.addressed) == (
        str(GROUP_ID),
        "anonymous admin",
        True,
    )
    assert asked.metadata["anonymous_admin"] is True and "anonymous_admin" not in echoed.metadata
    assert echoed.addressed is False  # a real bot is still never answered (no loops)


async def test_a_linked_channels_post_is_the_channels_not_a_member_named_telegram(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression (session 39): a channel's post forwarded into its discussion group comes
    # from Telegram's placeholder account 777000 "Telegram", not a bot: it was recorded
    # as said by a member named "Telegram", and a reply to it quoted "Telegram".
    placeholder = {"id": 777000, "is_bot": False, "first_name": "Telegram"}
    news = {"id": -100123, "type": "channel", "title": "City News", "username": "citynews"}
    origin = {"type": "channel", "date": 1700000000, "chat": news, "message_id": 9}
    post = tg_server.inject_message(GROUP_ID, "Road closed on Main St", sender_chat=news,
                                    is_automatic_forward=True, forward_origin=origin,
                                    **{"from": placeholder})  # fmt: skip
    tg_server.inject_message(GROUP_ID, "@my_agent_bot is it still closed?", reply_to=post,
                             from_id=2002, first_name="Bob")  # fmt: skip
    await host.wait_delivered(2)
    posted, asked = host.delivered
    assert (posted.sender_id, posted.sender_name) == ("-100123", "City News")
    assert "[replying to City News: \u201cRoad closed on Main St\u201d]" in asked.text
    assert "Telegram" not in asked.text


async def test_a_command_for_another_bot_is_not_ours_even_where_all_is_answered(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    ops = -100777  # respond: always
    tg_server.inject_message(ops, "/new@other_bot", from_id=OWNER_ID, title="Ops")
    tg_server.inject_message(ops, "/status@other_bot now", from_id=OWNER_ID, title="Ops")
    tg_server.inject_message(ops, "/status@my_agent_bot", from_id=OWNER_ID, title="Ops")
    tg_server.inject_message(ops, "/status", from_id=OWNER_ID, title="Ops")
    await host.wait_delivered(4)
    # Before, both were ours to answer: the other bot's /new started a new conversation
    # of the group and its /status was answered by this bot.
    assert [(m.text, m.addressed) for m in host.delivered] == [
        ("/new@other_bot", False),
        ("/status@other_bot now", False),
        ("/status", True),
        ("/status", True),
    ]


async def test_media_edits_and_odd_updates_never_crash(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    photo = [{"file_id": "a", "file_unique_id": "a", "width": 90, "height": 90},
             {"file_id": "b", "file_unique_id": "b", "width": 1280, "height": 960,
              "file_size": 123456}]  # fmt: skip
    tg_server.inject_message(OWNER_ID, photo=photo, caption="the view")
    tg_server.inject_message(
        OWNER_ID,
        document={"file_id": "d", "file_unique_id": "d", "file_name": "report.pdf",
                  "mime_type": "application/pdf", "file_size": 2048},
    )  # fmt: skip
    tg_server.inject_message(
        OWNER_ID, voice={"file_id": "v", "file_unique_id": "v", "duration": 7,
                         "mime_type": "audio/ogg"}
    )  # fmt: skip
    tg_server.inject_message(
        OWNER_ID,
        sticker={"file_id": "s", "file_unique_id": "s", "type": "regular", "width": 512,
                 "height": 512, "is_animated": False, "is_video": False, "emoji": "😀"},
    )  # fmt: skip
    tg_server.inject_message(OWNER_ID, location={"latitude": 52.52, "longitude": 13.405})
    tg_server.inject_message(OWNER_ID, new_chat_members=[{"id": 5, "is_bot": False,
                                                          "first_name": "X"}])  # fmt: skip
    tg_server.inject_message(OWNER_ID, some_future_feature={"x": 1})
    original = tg_server.inject_message(OWNER_ID, "meet at 5")
    tg_server.inject_edit(original, "meet at 6")
    # a callback without data (a game button) is answered and skipped
    tg_server.push_update(
        "callback_query",
        {"id": "g1", "from": {"id": OWNER_ID, "is_bot": False, "first_name": "O"},
         "chat_instance": "c", "game_short_name": "tetris"},
    )  # fmt: skip
    await host.wait_cursor(1011)
    texts = [m.text for m in host.delivered]
    assert texts == [
        "[photo] the view",
        "[document: report.pdf, 2 KB]",
        "[voice message, 7s]",
        "[sticker 😀]",
        "[location 52.52000, 13.40500]",
        "[unknown]",
        "meet at 5",
        '[edited, before: "meet at 5"] meet at 6',
    ]
    photo_att = host.delivered[0].attachments[0]
    assert (photo_att.kind, photo_att.size, photo_att.description) == ("photo", 123456, "1280x960")
    doc = host.delivered[1].attachments[0]
    assert (doc.kind, doc.name, doc.mime_type) == ("document", "report.pdf", "application/pdf")
    assert host.delivered[4].attachments[0].description == "52.52000, 13.40500"
    edit = host.delivered[-1]
    assert edit.message_id.startswith(f"{OWNER_ID}:{original['message_id']}:edit:")
    assert edit.metadata["edited"] is True
    assert edit.metadata["previous_text"] == "meet at 5"


async def test_an_edit_is_recorded_with_what_the_message_said_before(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression: an edit was recorded as "[edited] new text" alone: neither the owner
    # reading the transcript nor the model could tell what it had said before.
    original = tg_server.inject_message(OWNER_ID, "meet at 5 at the station")
    await host.wait_delivered(1)
    refused: list[str] = []
    host.refuse = lambda m: bool(m.metadata.get("edited")) and not refused.append(m.text)
    first = tg_server.inject_edit(original, "meet at 6 at the station")  # the disk refuses it
    await tg_server.wait_for("getUpdates", len(tg_server.calls_of("getUpdates")) + 2)
    assert refused
    host.refuse = lambda m: False  # retried: still knows what it said before
    await host.wait_delivered(2)
    tg_server.push_update(
        "edited_message", dict(first, text="meet at 7", edit_date=first["edit_date"] + 1)
    )
    await host.wait_delivered(3)
    long = tg_server.inject_message(OWNER_ID, "x" * 300)
    await host.wait_delivered(4)
    tg_server.inject_edit(long, "short now")
    await host.wait_delivered(5)
    second, third, shortened = host.delivered[1], host.delivered[2], host.delivered[4]
    assert second.text == '[edited, before: "meet at 5 at the station"] meet at 6 at the station'
    assert second.metadata["previous_text"] == "meet at 5 at the station"
    assert third.text == '[edited, before: "meet at 6 at the station"] meet at 7'
    assert third.metadata["previous_text"] == "meet at 6 at the station"
    assert shortened.text == f'[edited, before: "{"x" * 200}…"] short now'
    assert shortened.metadata["previous_text"] == "x" * 300  # in full


async def test_a_forward_says_whose_words_it_carries(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    anna = {"id": 5, "is_bot": False, "first_name": "Anna", "last_name": "Berg"}
    news = {"id": -1001, "type": "channel", "title": "City News"}
    now = int(time.time())
    origins = [
        {"type": "user", "date": 1700000000, "sender_user": anna},  # written long ago
        {"type": "hidden_user", "date": now, "sender_user_name": "Bob K"},
        {"type": "channel", "date": now, "chat": news, "message_id": 9},
        {"type": "chat", "date": now, "sender_chat": dict(news, type="supergroup")},
    ]
    tg_server.inject_message(OWNER_ID, "I quit.", forward_origin=origins[0])
    tg_server.inject_message(OWNER_ID, "Meet at 5", forward_origin=origins[1])
    tg_server.inject_message(OWNER_ID, "Road closed", forward_origin=origins[2])
    tg_server.inject_message(OWNER_ID, "/new", forward_origin=origins[3])
    # the bot's own answer forwarded back, and the owner's own words: said so, not by
    # names the model does not know for its own or the user's (before session 26)
    bot = {"id": tg_server.me["id"], "is_bot": True, "first_name": "My Agent"}
    owner = {"id": OWNER_ID, "is_bot": False, "first_name": "Olga"}
    for user in (bot, owner):
        origin = {"type": "user", "date": now, "sender_user": user}
        tg_server.inject_message(OWNER_ID, "Noon.", forward_origin=origin)
    tg_server.inject_message(
        OWNER_ID,
        photo=[{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}],
        caption="look",
        forward_origin=origins[0],
    )
    await host.wait_delivered(7)
    # Before, a forward read as the owner's own words ("I quit.") and a forwarded
    # "/new" ran as the owner's command.
    # Anna's words were written long before: said when (since session 26), or "I'll
    # come tomorrow" forwarded a week later read as tomorrow.
    assert [m.text for m in host.delivered] == [
        "[forwarded from Anna Berg, written 2023-11-14 22:13 UTC] I quit.",
        "[forwarded from Bob K] Meet at 5",
        "[forwarded from City News] Road closed",
        "[forwarded from City News] /new",
        "[forwarded from your own message] Noon.",
        "[forwarded from their own message] Noon.",
        "[forwarded from Anna Berg, written 2023-11-14 22:13 UTC] [photo] look",
    ]
    assert all(m.metadata["forwarded"] for m in host.delivered)
    assert host.delivered[0].metadata["forwarded_from"] == "Anna Berg"


async def test_a_hidden_link_keeps_its_address(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    text = "😀 Read the article and the docs."
    tg_server.inject_message(
        OWNER_ID,
        text,
        entities=[
            {"type": "text_link", "offset": 8, "length": 11, "url": "https://news.example/a?id=1"},
            {"type": "bold", "offset": 0, "length": 7},
            {"type": "text_link", "offset": 28, "length": 4, "url": "https://docs.example/"},
        ],  # offsets in UTF-16 units: the emoji counts two
    )
    tg_server.inject_message(
        OWNER_ID,
        photo=[{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}],
        caption="source",
        caption_entities=[
            {"type": "text_link", "offset": 0, "length": 6, "url": "https://s.example/"}
        ],
    )
    await host.wait_delivered(2)
    # Before, only the words were kept: the address behind them was lost.
    assert [m.text for m in host.delivered] == [
        "😀 Read the article (https://news.example/a?id=1) and the docs (https://docs.example/).",
        "[photo] source (https://s.example/)",
    ]


async def test_a_lone_surrogate_is_read_at_once(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression: the UTF-16 encoding of the text (for the hidden links) raised on a
    # lone surrogate, which JSON can carry: the message failed five times, a traceback
    # each, and later ones waited behind it before it was kept as "could not read".
    tg_server.inject_message(OWNER_ID, "smile \ud83d please")
    tg_server.inject_message(
        OWNER_ID,
        "a \udc00 link",
        entities=[{"type": "text_link", "offset": 4, "length": 4, "url": "https://l.example/"}],
    )
    tg_server.inject_message(OWNER_ID, "next message")
    await host.wait_delivered(3, timeout=5)
    assert [m.text for m in host.delivered] == [
        "smile \ud83d please",  # the router scrubs it (bot.router.scrubbed)
        "a \udc00 link (https://l.example/)",
        "next message",
    ]


async def test_an_albums_items_carry_the_album(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    def photo(n: int) -> list[dict[str, object]]:
        return [{"file_id": f"p{n}", "file_unique_id": f"p{n}", "width": 9, "height": 9}]

    # Telegram sends an album as one message per photo, the caption on the first.
    tg_server.inject_message(OWNER_ID, photo=photo(1), caption="our trip", media_group_id="a1")
    tg_server.inject_message(OWNER_ID, photo=photo(2), media_group_id="a1")
    tg_server.inject_message(OWNER_ID, photo=photo(3), media_group_id="a1")
    tg_server.inject_message(OWNER_ID, photo=photo(4), media_group_id="b2")
    await host.wait_delivered(4)
    # Each carries its album, the later ones marked as its parts (the core answers the
    # album once: test_an_albums_captions_all_reach_its_one_reply).
    assert [(m.text, m.addressed, m.metadata.get("album_part")) for m in host.delivered] == [
        ("[photo] our trip", True, None),
        ("[photo]", True, True),
        ("[photo]", True, True),
        ("[photo]", True, None),
    ]
    assert {m.metadata["media_group"] for m in host.delivered[:3]} == {"a1"}


async def test_a_reply_says_what_it_answers(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "Options: Lisbon or Porto."))
    ours = tg_server.sent[-1]
    max_said = tg_server.make_message(
        GROUP_ID, "The ferry leaves at 7.", from_id=7, first_name="Max"
    )
    long_one = tg_server.make_message(OWNER_ID, "word " * 60)
    tg_server.inject_message(OWNER_ID, "the second one", reply_to=ours)
    tg_server.inject_message(GROUP_ID, "@my_agent_bot true?", from_id=OWNER_ID, reply_to=max_said)
    tg_server.inject_message(OWNER_ID, "why?", reply_to=long_one)
    tg_server.inject_message(OWNER_ID, "/model haiku", reply_to=ours)  # still a command
    topic = tg_server.make_message(GROUP_ID, forum_topic_created={"name": "t", "icon_color": 1})
    tg_server.inject_message(GROUP_ID, "in a topic", from_id=OWNER_ID, reply_to=topic)
    await host.wait_delivered(5)
    # Before, only the words were kept: "the second one" of what, no one could tell
    # once that message had left the assistant's working context.
    assert [m.text for m in host.delivered] == [
        "[replying to your message: “Options: Lisbon or Porto.”] the second one",
        "[replying to Max: “The ferry leaves at 7.”] @my_agent_bot true?",
        # the owner's own message, not "Ann" (since session 26): the model may not
        # know the name is the user's, and took it for someone else's words
        "[replying to their own message: “" + "word " * 23 + "word…”] why?",
        "/model haiku",
        "in a topic",
    ]


async def test_a_reply_to_a_message_of_another_chat_says_what_it_answers(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression: a reply made with Telegram's "Reply in another chat" (a channel post
    # asked about in the bot's chat) carries the post in ``external_reply``, not in
    # ``reply_to_message``, and only the words were kept: "what do you make of this?"
    # reached the assistant with nothing to say what "this" was.
    post = {
        "origin": {"type": "channel", "date": 1, "message_id": 77,
                   "chat": {"id": -1009, "type": "channel", "title": "City News"}},
        "chat": {"id": -1009, "type": "channel", "title": "City News"},
        "message_id": 77,
    }  # fmt: skip
    tg_server.inject_message(
        OWNER_ID,
        "what do you make of this?",
        external_reply=post,
        quote={"text": "The bridge closes on Monday\nfor six weeks", "position": 0},
    )
    photo = [{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}]
    by_max = {
        "origin": {"type": "user", "date": 1,
                   "sender_user": {"id": 7, "is_bot": False, "first_name": "Max"}},
        "photo": photo,
    }  # fmt: skip
    tg_server.inject_message(OWNER_ID, "where is this?", external_reply=by_max)
    tg_server.inject_message(OWNER_ID, "/search bridge", external_reply=post)  # a command
    await host.wait_delivered(3)
    assert [m.text for m in host.delivered] == [
        "[replying to a message of City News (another chat): \u201cThe bridge closes on "
        "Monday for six weeks\u201d] what do you make of this?",
        "[replying to a photo of Max (another chat)] where is this?",
        "/search bridge",
    ]


async def test_buttons_are_answered_and_delivered_as_commands(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    await channel.send(
        OutboundMessage(
            "telegram", str(OWNER_ID), "**Stranger** wrote: hi", kind="escalation",
            actions=(("Trust", "/trust p1a2b3"), ("Block", "/block p1a2b3"),
                     ("Reply", "/reply p1a2b3")),
        )
    )  # fmt: skip
    escalation = tg_server.sent[-1]
    buttons = escalation["reply_markup"]["inline_keyboard"][0]
    assert [(b["text"], b["callback_data"]) for b in buttons] == [
        ("Trust", "/trust p1a2b3"), ("Block", "/block p1a2b3"), ("Reply", "/reply p1a2b3"),
    ]  # fmt: skip
    query = tg_server.inject_callback(OWNER_ID, "/trust p1a2b3", escalation, username="Owner")
    await host.wait_delivered(1)
    pressed = host.delivered[0]
    assert pressed.text == "/trust p1a2b3" and pressed.sender_id == str(OWNER_ID)
    assert pressed.chat_id == str(OWNER_ID) and pressed.message_id == f"callback:{query}"
    assert tg_server.calls_of("answerCallbackQuery")[0]["callback_query_id"] == query

    # Reply: a ForceReply prompt, and the answer to it becomes "/reply <id> <text>"
    tg_server.inject_callback(OWNER_ID, "/reply p1a2b3", escalation)
    await tg_server.wait_sent(OWNER_ID, 2)
    prompt = tg_server.sent[-1]
    assert prompt["reply_markup"]["force_reply"] is True
    # The prompt names the party by id only: it quotes the escalation it belongs to, so
    # with several pending the owner sees whom they answer (before, "p1a2b3" alone).
    asked = tg_server.calls_of("sendMessage")[-1]
    assert asked["reply_parameters"]["message_id"] == escalation["message_id"]
    tg_server.inject_message(OWNER_ID, "Sure, Tuesday works.", reply_to=prompt)
    await host.wait_delivered(2)
    assert host.delivered[1].text == "/reply p1a2b3 Sure, Tuesday works."


async def test_the_reply_all_button_asks_for_the_words_as_reply_does(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression (session 42): an escalation of a mail that went to others too named
    # /replyall (session 41), but its buttons had Reply only.
    await channel.send(
        OutboundMessage(
            "telegram", str(OWNER_ID), "Message from Eve (email) ...", kind="escalation",
            actions=(("Block", "/block p1a2b3"), ("Reply", "/reply p1a2b3"),
                     ("Reply all", "/replyall p1a2b3")),
        )
    )  # fmt: skip
    escalation = tg_server.sent[-1]
    buttons = escalation["reply_markup"]["inline_keyboard"][0]
    assert [(b["text"], b["callback_data"]) for b in buttons][-1] == (
        "Reply all",
        "/replyall p1a2b3",
    )
    tg_server.inject_callback(OWNER_ID, "/replyall p1a2b3", escalation)
    await tg_server.wait_sent(OWNER_ID, 2)
    prompt = tg_server.sent[-1]
    assert prompt["reply_markup"]["force_reply"] is True
    assert prompt["text"].startswith(
        "✍️ Write your reply to p1a2b3 and everyone else their message went to (/replyall p1a2b3)"
    )
    assert host.delivered == []  # nothing reaches the core before the words
    tg_server.inject_message(OWNER_ID, "Monday it is.", reply_to=prompt)
    await host.wait_delivered(1)
    assert host.delivered[0].text == "/replyall p1a2b3 Monday it is."


async def test_an_escalation_quotes_the_stranger_literally(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    # Regression: the stranger's text went through Markdown, so the owner's own bot showed
    # their "[tap here](https://evil.test/phish)" as a link and "# Notice" as a heading.
    quote = "**URGENT**: [tap here](https://evil.test/phish)\n# Assistant notice\n> `/trust p1`"
    body = f"Message from Bank, not a known contact (id p1):\n\u201c{quote}\u201d"
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), body, kind="escalation"))
    sent = tg_server.sent[-1]
    assert "<a " not in sent["raw_text"] and "<b>" not in sent["raw_text"]
    assert "<blockquote>" not in sent["raw_text"] and "<code>" not in sent["raw_text"]
    assert sent["text"] == body  # every character as written, nothing hidden


async def test_hostile_markdown_is_sent_escaped(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    text = "<script>alert(1)</script> **bold** <b>unclosed &amp; [x](javascript:alert(1))"
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), text))
    sent = tg_server.sent[-1]
    assert sent["parse_mode"] == "HTML"
    assert sent["raw_text"].startswith("&lt;script&gt;alert(1)&lt;/script&gt; <b>bold</b>")
    assert sent["text"] == (
        "<script>alert(1)</script> bold <b>unclosed &amp; [x](javascript:alert(1))"
    )


async def test_long_reply_arrives_in_ordered_parts_with_buttons_on_the_last(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    text = "\n\n".join(f"Part {i}. " + "lorem ipsum " * 40 for i in range(21))[:10_000]
    result = await channel.send(
        OutboundMessage("telegram", str(OWNER_ID), text, actions=(("Trust", "/trust x"),))
    )
    sent = tg_server.sent_to(OWNER_ID)
    assert len(sent) == 3
    assert all(len(m["text"]) <= 4096 for m in sent)
    assert " ".join(" ".join(m["text"] for m in sent).split()) == " ".join(text.split())
    assert [("reply_markup" in m) for m in sent] == [False, False, True]
    assert result.message_ref == f"{OWNER_ID}:{sent[-1]['message_id']}"


async def test_flood_control_waits_retry_after_then_succeeds(
    tg_server: FakeTelegramServer, channel: TelegramChannel, sleeps: SleepRecorder
) -> None:
    tg_server.fail_next("sendMessage", code=429, retry_after=3, times=2)
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "after the flood"))
    assert sleeps.delays == [3.0, 3.0]
    assert len(tg_server.calls_of("sendMessage")) == 3
    assert tg_server.sent[-1]["text"] == "after the flood"


async def test_server_errors_back_off_and_a_failed_send_resumes_without_duplicates(
    tg_server: FakeTelegramServer, channel: TelegramChannel, sleeps: SleepRecorder
) -> None:
    text = "\n\n".join(["alpha " * 600, "beta " * 700, "gamma " * 600])
    parts_expected = 3
    retries = channel.config.send_retries
    msg = OutboundMessage("telegram", str(OWNER_ID), text, outbox_id=77)
    # part 1 goes through, then part 2 keeps failing with 502 beyond the retry budget
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "warm-up"))
    tg_server.sent.clear()
    fail_sends(tg_server, range(2, retries + 3), ApiError(502, "Bad Gateway"))
    with pytest.raises(Exception, match="Bad Gateway"):
        await channel.send(msg)
    assert len(sleeps.delays) == retries
    assert sleeps.delays == sorted(sleeps.delays) or max(sleeps.delays) <= 30
    assert len(tg_server.sent) == 1
    await channel.send(msg)  # the outbox retries the same message
    assert len(tg_server.sent) == parts_expected
    assert [m["text"].split()[0] for m in tg_server.sent] == ["alpha", "beta", "gamma"]


async def test_permanent_failures_raise_permanent_send_error(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    tg_server.missing_chats.add(555)
    tg_server.blocked_chats.add(556)
    with pytest.raises(PermanentSendError, match="chat not found"):
        await channel.send(OutboundMessage("telegram", "555", "hi"))
    with pytest.raises(PermanentSendError, match="blocked"):
        await channel.send(OutboundMessage("telegram", "556", "hi"))
    tg_server.fail_next("sendMessage", code=403, description="Forbidden: user is deactivated")
    with pytest.raises(PermanentSendError, match="deactivated"):
        await channel.send(OutboundMessage("telegram", "557", "hi"))
    assert len(tg_server.calls_of("sendMessage")) == 3  # each asked once, never retried


async def test_refused_html_falls_back_to_plain_text(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    await channel.sender.send_part(OWNER_ID, "<b>broken &amp; unclosed")
    first, second = tg_server.calls_of("sendMessage")[-2:]
    assert first["parse_mode"] == "HTML" and "parse_mode" not in second
    assert tg_server.sent[-1]["text"] == "broken & unclosed"


async def test_typing_indicator(tg_server: FakeTelegramServer, channel: TelegramChannel) -> None:
    await channel.typing(str(OWNER_ID))
    assert tg_server.calls_of("sendChatAction") == [{"chat_id": str(OWNER_ID), "action": "typing"}]
    assert str(OWNER_ID) in channel._typing
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "done"))
    assert str(OWNER_ID) not in channel._typing


@pytest.mark.parametrize(("code", "retry_after"), [(500, None), (429, 2)])
async def test_polling_survives_server_errors_and_flood_control(
    tg_server: FakeTelegramServer,
    host: RecordingHost,
    sleeps: SleepRecorder,
    code: int,
    retry_after: int | None,
) -> None:
    # 429: regression, getUpdates was retried on the generic backoff (after ~1 s) instead
    # of its retry_after, which only lengthens a flood-control ban.
    tg_server.fail_next("getUpdates", code=code, retry_after=retry_after, times=1)
    ch = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=sleeps)
    await ch.start(host)
    try:
        tg_server.inject_message(OWNER_ID, "still here")
        await host.wait_delivered(1, timeout=15)
    finally:
        await ch.stop()
    assert host.delivered[0].text == "still here"
    polls = [c.at for c in tg_server.calls if c.method.lower() == "getupdates"]
    assert polls[1] - polls[0] >= (retry_after or 0)


async def test_stop_is_prompt_during_a_long_poll(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    ch = TelegramChannel(telegram_config(tg_server.base_url, polling_timeout=50), None)
    await ch.start(host)
    await tg_server.wait_for("getUpdates")
    await asyncio.wait_for(ch.stop(), 5)


def test_backoff_grows_with_jitter_and_resets() -> None:
    from channels.telegram.retries import Backoff

    low = Backoff(1.0, 8.0, rng=lambda: 0.0)
    high = Backoff(1.0, 8.0, rng=lambda: 1.0)
    assert [low.next() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert [high.next() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    high.reset()
    assert high.next() == 1.0


async def test_an_unexpected_failure_does_not_end_the_polling(
    tg_server: FakeTelegramServer,
    host: RecordingHost,
    sleeps: SleepRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression: an exception raised outside the loop's own handling (its backoff's
    # OverflowError at the 1,024th failed poll in a row) ended the polling task for
    # good while the daemon said "ready"; nothing was received again until a restart.
    import channels.telegram.receiving as receiving

    overflows = [OverflowError("int too large to convert to float")]

    class Overflowing(receiving.Backoff):
        def next(self) -> float:
            if overflows:
                raise overflows.pop()
            return 0.01

    monkeypatch.setattr(receiving, "Backoff", Overflowing)
    tg_server.fail_next("getUpdates", code=502)  # the handler's backoff then fails
    channel = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=sleeps)
    await channel.start(host)
    try:
        tg_server.inject_message(OWNER_ID, "still there?")
        await host.wait_delivered(1, timeout=20)
        assert not overflows and host.delivered[0].text == "still there?"
        assert channel._task is not None and not channel._task.done()
    finally:
        await channel.stop()


async def test_a_message_that_cannot_be_read_is_recorded_as_received_not_skipped(
    tg_server: FakeTelegramServer,
    channel: TelegramChannel,
    host: RecordingHost,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import channels.telegram.receiving as receiving

    real = receiving.translate_message

    def fragile(message, **kw):  # type: ignore[no-untyped-def]
        if message.text == "call the  bank at 9":
            raise ValueError("a shape this version does not expect")
        return real(message, **kw)

    monkeypatch.setattr(receiving, "translate_message", fragile)
    tg_server.inject_message(OWNER_ID, "call the  bank at 9")
    tg_server.inject_message(OWNER_ID, "and then?")
    await host.wait_delivered(2, timeout=20)
    # Before, the update was skipped after five failures: the owner's words were lost
    # and only the log knew. Now they are recorded as received, labelled, in order.
    assert [(m.text, m.chat_id, m.addressed) for m in host.delivered] == [
        (
            "[a message the assistant could not read (ValueError); as received:] "
            "call the bank at 9",
            str(OWNER_ID),
            True,
        ),
        ("and then?", str(OWNER_ID), True),
    ]
    assert host.delivered[0].message_id == f"{OWNER_ID}:101"  # its id: a redelivery is a duplicate
    # a message in a group that is not allowed stays ignored, readable or not
    tg_server.inject_message(-100999, "call the  bank at 9", from_id=OWNER_ID)
    tg_server.inject_message(OWNER_ID, "last")
    await host.wait_delivered(3, timeout=20)
    assert host.delivered[-1].text == "last"


async def test_a_bare_command_of_ours_in_a_group_is_for_the_bot(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # Regression: with the bot alone in a group, Telegram's apps send a command picked
    # from its menu bare ("/help", no @ourbot), and in a "respond: mention" group it was
    # taken for chat: recorded, never run (the owner's "/new " too).
    for text in ("/help", "/new ", "/MODEL haiku", "/start"):
        tg_server.inject_message(GROUP_ID, text, from_id=OWNER_ID)
    tg_server.inject_message(GROUP_ID, "/weather", from_id=OWNER_ID)  # not one of ours
    tg_server.inject_message(GROUP_ID, "/help@other_bot", from_id=OWNER_ID)
    tg_server.inject_message(GROUP_ID, "a / b", from_id=OWNER_ID)
    await host.wait_delivered(7)
    assert [(m.text, m.addressed) for m in host.delivered] == [
        ("/help", True),
        ("/new ", True),
        ("/MODEL haiku", True),
        ("/start", False),  # every bot's: rarely this one's, bare in a group
        ("/weather", False),
        ("/help@other_bot", False),
        ("a / b", False),
    ]


async def test_a_command_for_another_bot_is_never_ours_in_a_private_chat(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    tg_server.inject_message(OWNER_ID, "/model@other_bot opus")
    tg_server.inject_message(OWNER_ID, "/model@My_Agent_Bot haiku")
    tg_server.inject_message(STRANGER_ID, "/new@other_bot")
    anna = {"id": 5, "is_bot": False, "first_name": "Anna"}
    origin = {"type": "user", "date": int(time.time()), "sender_user": anna}
    tg_server.inject_message(OWNER_ID, "/start@other_bot", forward_origin=origin)
    await host.wait_delivered(4)
    # Before, a private chat has no "addressed" test at all: the other bot's /model was
    # run by this one. Ours (any case) is still ours, its @suffix stripped.
    assert [(m.text, m.addressed) for m in host.delivered] == [
        ("/model@other_bot opus", False),
        ("/model haiku", True),
        ("/new@other_bot", False),
        ("[forwarded from Anna] /start@other_bot", True),  # words passed on: no command
    ]


async def test_a_send_to_a_group_upgraded_unseen_follows_it_to_the_supergroup(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    upgraded = -1009990002
    # Telegram upgraded the Family group while the bot was away: the service messages
    # announcing it were never seen, only the 400 of a send tells the new id.
    tg_server.migrated_chats[GROUP_ID] = upgraded
    cfg = telegram_config(tg_server.base_url, send_retries=0)
    ch = TelegramChannel(cfg, None, sleep=sleeps)
    await ch.start(host)
    try:
        first = await ch.send(OutboundMessage("telegram", str(GROUP_ID), "one"))
        await ch.send(OutboundMessage("telegram", str(GROUP_ID), "two"))
        await ch.typing(str(GROUP_ID))
        tg_server.inject_message(upgraded, "@my_agent_bot still there?", from_id=OWNER_ID)
        await host.wait_delivered(1)
    finally:
        await ch.stop()
    # Before, the move counted as a failed attempt (send_retries 0: the outbox retried
    # it, in vain, until it gave up), every later send asked the old id first, and the
    # group's messages from its new id were dropped as not on the allow-list.
    assert first.message_ref is not None and first.message_ref.startswith(f"{upgraded}:")
    assert [m["text"] for m in tg_server.sent_to(upgraded)] == ["one", "two"]
    assert [c["chat_id"] for c in tg_server.calls_of("sendMessage")] == [
        str(GROUP_ID), str(upgraded), str(upgraded)
    ]  # fmt: skip
    assert tg_server.calls_of("sendChatAction")[-1]["chat_id"] == str(upgraded)
    (asked,) = host.delivered
    assert (asked.group_id, asked.chat_id, asked.addressed) == (str(GROUP_ID), str(upgraded), True)
    assert str(upgraded) in host.cursors[("telegram", "migrated_groups")]  # kept for a restart


async def test_a_webhook_set_while_polling_is_deleted_again(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    await tg_server.wait_for("getUpdates")
    # Someone (a test deployment with the same token, a BotFather tool) sets a webhook:
    # every getUpdates is refused with 409 until it is deleted.
    tg_server.webhook = "https://example.invalid/hook"
    polls = len(tg_server.calls_of("getUpdates"))
    await tg_server.wait_for("getUpdates", polls + 1)  # the poll in progress ends (1 s)
    tg_server.inject_message(OWNER_ID, "are you there?")
    await host.wait_delivered(1, timeout=15)
    # Before, polling retried the refused getUpdates forever and nothing came in.
    assert host.delivered[0].text == "are you there?"
    deletes = tg_server.calls_of("deleteWebhook")
    assert len(deletes) == 2 and all(d.get("drop_pending_updates") != "true" for d in deletes)


async def test_an_album_cut_by_a_restart_keeps_its_addressing(
    tg_server: FakeTelegramServer, host: RecordingHost, sleeps: SleepRecorder
) -> None:
    photo = [{"file_id": "p", "file_unique_id": "p", "width": 9, "height": 9}]
    cfg = telegram_config(tg_server.base_url)
    first = TelegramChannel(cfg, None, sleep=sleeps)
    await first.start(host)
    try:
        tg_server.inject_message(GROUP_ID, photo=photo, caption="@my_agent_bot where?",
                                 media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
        await host.wait_delivered(1)
    finally:
        await first.stop()
    second = TelegramChannel(cfg, None, sleep=sleeps)
    await second.start(host)
    try:
        tg_server.inject_message(GROUP_ID, photo=photo, caption="the second beach",
                                 media_group_id="g1", from_id=OWNER_ID)  # fmt: skip
        await host.wait_delivered(2)
    finally:
        await second.stop()
    # Before, the restart forgot the album: its second photo came as a first one, not
    # addressed (no mention in its caption), and was left out of the album's reply.
    later = host.delivered[1]
    assert later.addressed is True and later.metadata.get("album_part") is True


async def test_a_reply_to_a_deleted_forum_topic_goes_to_the_general_topic(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    tg_server.deleted_topics.add(7)  # deleted (or topics turned off) since it was asked
    meta = {"topic": 7, "files": [{"ref": "file-1", "kind": "photo"}]}
    msg = OutboundMessage("telegram", str(GROUP_ID), "the answer", metadata=meta)
    await channel.send(msg)
    # Before, "message thread not found" was a permanent failure: the reply was lost.
    assert [m["text"] for m in tg_server.sent_to(GROUP_ID)] == ["the answer", ""]
    calls = [c for c in tg_server.calls if c.method.lower() in ("sendmessage", "sendphoto")]
    assert [c.params.get("message_thread_id") for c in calls] == ["7", None, "7", None]


async def test_a_refused_token_is_named_once_retried_slowly_and_recovers(
    tg_server: FakeTelegramServer, host: RecordingHost, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: a token Telegram refused (401) was retried every few seconds forever,
    # a warning each time, naming neither the key nor that retrying could not help.
    caplog.set_level(logging.DEBUG, logger="my_agent.telegram")
    tg_server.token = "123456:revoked"
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    ch.refused_retry = 0.3
    await ch.start(host)
    try:
        await tg_server.wait_for("getMe", 4)
        assert not ch.started
        [problem] = ch.problems()
        assert "TELEGRAM_BOT_TOKEN" in problem and "channels.telegram.token" in problem
        assert "refused" in problem
        # kept for `my-agent status` (stopped daemon, /readyz line), through the host's
        # alert (told to the owner elsewhere: this channel cannot send)
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {"problem": problem}
        assert host.alerts[0] == ("telegram", "token", problem)
        assert ch.sending_blocked  # the core tells the owner by another channel
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.levelname for r in loud] == ["ERROR"], [r.getMessage() for r in loud]
        assert "TELEGRAM_BOT_TOKEN" in loud[0].getMessage()
        calls = [c.at for c in tg_server.calls if c.method.lower() == "getme"]
        assert all(b - a >= 0.25 for a, b in itertools.pairwise(calls))
        # Restored with BotFather: back without a restart.
        tg_server.token = TOKEN
        tg_server.inject_message(OWNER_ID, "back?")
        await host.wait_delivered(1, timeout=10)
        assert ch.started and ch.problems() == []
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {}
        assert host.alerts[-1] == ("telegram", "token", None) and not ch.sending_blocked
        # Revoked while polling: said again, once.
        caplog.clear()
        tg_server.token = "123456:revoked-again"
        polls = len(tg_server.calls_of("getUpdates"))
        await tg_server.wait_for("getMe", len(tg_server.calls_of("getMe")) + 2, timeout=15)
        assert len(tg_server.calls_of("getUpdates")) > polls
        assert not ch.started and ch.problems()
        loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.levelname for r in loud] == ["ERROR"], [r.getMessage() for r in loud]
    finally:
        await ch.stop()


async def test_a_refusal_kept_from_the_last_run_is_cleared_once_the_token_works(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    # `my-agent status` lists the kept refusal while the daemon is stopped; a restart
    # with a token Telegram accepts must not leave it there.
    host.cursors[("telegram", "alert:token")] = json.dumps({"problem": "refused"})
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    await ch.start(host)
    try:
        assert ch.started and ch.problems() == []
        assert host.alerts == [("telegram", "token", None)]
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {}
    finally:
        await ch.stop()


async def test_a_refusal_kept_under_the_old_token_cursor_moves_to_the_alert(
    tg_server: FakeTelegramServer, host: RecordingHost
) -> None:
    # Before session 25 the refusal was kept as the cursor `token`, apart from the
    # alerts: the first start of this version moves it, so that one line is kept.
    host.cursors[("telegram", "token")] = json.dumps({"problem": "Telegram refused it"})
    tg_server.token = "123456:revoked"
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    ch.refused_retry = 60.0
    await ch.start(host)
    try:
        assert json.loads(host.cursors[("telegram", "token")]) == {}
        [(_, key, problem)] = host.alerts  # refused again at start
        assert key == "token" and "TELEGRAM_BOT_TOKEN" in str(problem)
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {"problem": problem}
    finally:
        await ch.stop()
    # and accepted at the next start: the moved line is cleared
    tg_server.token = TOKEN
    ch = TelegramChannel(telegram_config(tg_server.base_url), None)
    await ch.start(host)
    try:
        assert ch.started
        assert json.loads(host.cursors[("telegram", "alert:token")]) == {}
        assert json.loads(host.cursors[("telegram", "token")]) == {}
    finally:
        await ch.stop()
