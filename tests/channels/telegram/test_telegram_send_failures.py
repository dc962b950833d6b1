"""The world answering back: sends Telegram times out on, chats that block the bot."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from aiogram.client.telegram import TelegramAPIServer

from bot.bench.fakes.telegram_api import TOKEN, ApiError, FakeTelegramServer
from bot.channel import PermanentSendError, Unreachable
from bot.events import OutboundMessage
from channels.telegram import retries, typing_indicator
from channels.telegram.adapter import TelegramChannel

from .conftest import OWNER_ID, RecordingHost, SleepRecorder, telegram_config, wait_until


def _accepted_but_never_confirmed(tg_server: FakeTelegramServer, channel: TelegramChannel) -> None:
    """Every sendMessage reaches the fake server, and its answer comes too late."""
    dispatch = tg_server._dispatch

    async def accepted_then_silent(method: str, p: dict[str, Any]) -> Any:
        result = await dispatch(method, p)
        if method == "sendmessage":
            await asyncio.sleep(1.0)  # the answer never comes in time
        return result

    tg_server._dispatch = accepted_then_silent  # type: ignore[method-assign]
    channel.session.timeout = 0.2


async def test_a_send_telegram_accepted_but_never_confirmed_is_not_repeated_forever(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    _accepted_but_never_confirmed(tg_server, channel)
    msg = OutboundMessage("telegram", str(OWNER_ID), "see you at 7", outbox_id=5)
    # What the outbox does: send again after each failure, until it is told to stop.
    with pytest.raises(PermanentSendError, match="may have arrived"):
        for _ in range(5):
            try:
                await channel.send(msg)
            except PermanentSendError:
                raise
            except Exception:
                continue
    # Before, each timeout was retried like a refused connection: send_retries (8) more
    # copies per outbox attempt, and again at each of the outbox's 50 attempts.
    copies = [m for m in tg_server.sent if m["text"] == "see you at 7"]
    assert len(copies) == retries.UNCONFIRMED_MAX


async def test_unconfirmed_sends_are_counted_across_the_outboxs_attempts(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    # With few retries per call, each call handed the failure back to the outbox after
    # 2 unconfirmed copies and the next attempt counted from 0 again: 2 copies at each
    # of the outbox's attempts, never given up on.
    _accepted_but_never_confirmed(tg_server, channel)
    channel.config.send_retries = 1
    msg = OutboundMessage("telegram", str(OWNER_ID), "the door code is 4711", outbox_id=6)
    outcomes = []
    for _ in range(5):  # the outbox's attempts
        try:
            await channel.send(msg)
        except PermanentSendError:
            outcomes.append("given up")
            break
        except Exception:
            outcomes.append("retry later")
    assert outcomes == ["retry later", "given up"]
    copies = [m for m in tg_server.sent if m["text"] == "the door code is 4711"]
    assert len(copies) == retries.UNCONFIRMED_MAX


async def test_a_refused_connection_is_retried_as_before(
    tg_server: FakeTelegramServer, channel: TelegramChannel, sleeps: SleepRecorder
) -> None:
    # Nothing reached Telegram: no duplicate possible, the usual budget applies.
    channel.config.send_retries = 5
    url = tg_server.base_url
    await tg_server.close()
    with pytest.raises(Unreachable):  # the outbox tries again later, for as long as it takes
        await channel.send(OutboundMessage("telegram", str(OWNER_ID), "hello"))
    assert len(sleeps.delays) == 5
    await tg_server.start(port=int(url.rsplit(":", 1)[1]))


@pytest.fixture
def black_hole() -> Iterator[str]:
    """The base URL of a port whose connects hang: its accept queue is full, so the
    kernel drops the SYNs, as a firewall dropping packets or an ISP outage behind a
    working router does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    yield f"http://127.0.0.1:{port}"
    for sock in (*fillers, server):
        sock.close()


async def test_a_connect_that_hangs_sent_nothing_and_is_held_not_given_up(
    channel: TelegramChannel, black_hole: str
) -> None:
    # Regression: aiogram's one total timeout made a connect that never completed look
    # like a request that went out unanswered ("it may have arrived"): the reply was
    # given up on at the third, about three minutes into an outage.
    channel.config.send_retries = 1
    channel.session.api = TelegramAPIServer.from_base(black_hole)
    channel.session.timeout = 0.3
    await channel.session.close()  # no pooled connection: each send connects anew
    msg = OutboundMessage("telegram", str(OWNER_ID), "the answer", outbox_id=7)
    for _ in range(retries.UNCONFIRMED_MAX + 1):  # the outbox's attempts
        with pytest.raises(Unreachable, match="could not be reached"):
            await channel.send(msg)


async def test_a_send_telegram_keeps_answering_5xx_is_held_not_given_up(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    channel.config.send_retries = 2
    tg_server.fail_next("sendMessage", code=502, description="Bad Gateway", times=3)
    with pytest.raises(Unreachable, match="Bad Gateway"):
        await channel.send(OutboundMessage("telegram", str(OWNER_ID), "later"))
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "later"))
    assert [m["text"] for m in tg_server.sent] == ["later"]


async def test_polling_back_after_an_outage_says_the_server_is_reachable(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    # The outbox then sends what the outage held at once, not when each backoff ends.
    await wait_until(lambda: len(tg_server.calls_of("getUpdates")) >= 1)
    assert host.reachable_again == []
    url = tg_server.base_url
    await tg_server.close()
    await asyncio.sleep(0.3)  # a poll or two fails
    await tg_server.start(port=int(url.rsplit(":", 1)[1]))
    await wait_until(lambda: host.reachable_again == ["telegram"])


async def test_typing_stops_in_a_chat_that_blocked_the_bot(
    tg_server: FakeTelegramServer, channel: TelegramChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(typing_indicator, "TYPING_REFRESH_SECONDS", 0.01)
    tg_server.blocked_chats.add(556)
    await channel.typing("556")  # returns once the first chat action was refused
    assert len(tg_server.calls_of("sendChatAction")) == 1
    assert "556" not in channel._typing  # no refresh left running
    # A negative check (its precondition, the refusal, awaited above): nothing more is
    # asked in the time of dozens of refresh periods. Before, "typing…" was asked again
    # every 4.5 s for typing_max_seconds (120 s), refused each time.
    await asyncio.sleep(0.3)
    assert len(tg_server.calls_of("sendChatAction")) == 1


async def test_typing_waits_while_the_token_is_refused_and_resumes_once_accepted(
    tg_server: FakeTelegramServer, channel: TelegramChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: while Telegram refused the token (sends held), "typing…" was asked
    # at once and again every 4.5 s for typing_max_seconds, each refused with a 401.
    monkeypatch.setattr(typing_indicator, "TYPING_REFRESH_SECONDS", 0.01)
    channel.refused_retry = 0.05
    tg_server.token = "123456:revoked"
    await wait_until(lambda: channel.sending_blocked)
    await channel.typing(str(OWNER_ID))
    assert str(OWNER_ID) in channel._typing  # kept, to resume
    # A negative check (the refresh is running, awaited above): nothing is asked in the
    # time of dozens of refresh periods (the first waits for the token after one).
    await asyncio.sleep(0.3)
    assert tg_server.calls_of("sendChatAction") == []
    tg_server.token = TOKEN  # restored with BotFather
    await tg_server.wait_for("sendChatAction")  # the reply is still owed: shown again
    assert not channel.sending_blocked
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), "done"))
    assert str(OWNER_ID) not in channel._typing


async def test_a_chat_action_refused_401_holds_the_sends_and_pauses_typing(
    tg_server: FakeTelegramServer,
    channel: TelegramChannel,
    host: RecordingHost,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The token revoked since the last poll, the typing indicator the first to meet
    # the 401: before, it was logged at DEBUG and asked again every refresh. (Telegram
    # refuses the chat action alone here: polling, which would notice too, never does.)
    monkeypatch.setattr(typing_indicator, "TYPING_REFRESH_SECONDS", 0.01)
    tg_server.fail_next("sendChatAction", code=401, description="Unauthorized")
    await channel.typing(str(OWNER_ID))
    assert channel.sending_blocked  # held and said at once, not left to the next poll
    assert [(key, bool(problem)) for _, key, problem in host.alerts] == [("token", True)]
    # the polling loop sets up again, Telegram accepts the token: typing resumes
    await wait_until(lambda: len(tg_server.calls_of("sendChatAction")) >= 2)
    assert not channel.sending_blocked
    assert host.alerts[-1] == ("telegram", "token", None)


def _long_formatted_reply() -> str:
    code = (
        "```python\n" + "\n".join(f"    x_{j} = a*b & c < d  # {j}" for j in range(300)) + "\n```"
    )
    para = "Para with **bold**, *italic*, [a link](https://example.com/?a=1&b=2), `x<y` 👨‍👩‍👧 "
    items = "\n".join(f"- item {j} **b** [l](https://e.com/{j})" for j in range(60))
    blocks = [para * 12, code, items, "## Heading", para * 30, items]
    return "\n\n".join(blocks * 2)


async def test_a_long_formatted_reply_arrives_whole_and_a_refused_part_goes_plain(
    tg_server: FakeTelegramServer, channel: TelegramChannel
) -> None:
    text = _long_formatted_reply()
    assert len(text) > 20_000
    send = tg_server._send_message
    calls = 0

    def refuse_the_second(p: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 2:  # Telegram refuses this part's entities (whatever its reason)
            from bot.bench.fakes.telegram_api import ApiError

            raise ApiError(400, "Bad Request: can't parse entities: test")
        return send(p)

    tg_server._send_message = refuse_the_second  # type: ignore[method-assign]
    await channel.send(OutboundMessage("telegram", str(OWNER_ID), text, outbox_id=9))
    sent = tg_server.sent_to(OWNER_ID)
    assert len(sent) >= 6
    # the refused part alone went as plain text, the others as HTML Telegram accepted
    assert [m.get("parse_mode") for m in sent].count(None) == 1
    assert sent[1].get("parse_mode") is None
    whole = " ".join(" ".join(m["text"] for m in sent).split())
    for j in (0, 150, 299):  # nothing lost, in order
        assert whole.count(f"x_{j} = a*b & c < d # {j}") == 2
    assert whole.index("x_0 =") < whole.index("x_299 =") < whole.index("item 59")


def _two_parts() -> str:
    text = "word " * 1200  # two parts of at most 4,096 characters
    assert len(text) > 4096
    return text


async def _restarted(
    tg_server: FakeTelegramServer, cursors: dict[tuple[str, str], str]
) -> tuple[TelegramChannel, RecordingHost]:
    """A new channel over the cursors state.db held at the kill (none of the old
    channel's except/finally blocks ran: a SIGKILL, a power cut)."""
    host = RecordingHost()
    host.cursors = dict(cursors)
    ch = TelegramChannel(telegram_config(tg_server.base_url), None, sleep=SleepRecorder())
    await ch.start(host)
    return ch, host


async def test_a_kill_while_a_later_part_is_in_flight_resends_only_that_part(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    dispatch = tg_server._dispatch
    in_flight, release = asyncio.Event(), asyncio.Event()

    async def hang_the_second(method: str, p: dict[str, Any]) -> Any:
        if method == "sendmessage" and len(tg_server.sent) == 1:  # the first confirmed
            in_flight.set()
            await release.wait()  # never answered: the daemon dies meanwhile
            raise ApiError(502, "Bad Gateway")
        return await dispatch(method, p)

    tg_server._dispatch = hang_the_second  # type: ignore[method-assign]
    msg = OutboundMessage("telegram", str(OWNER_ID), _two_parts(), outbox_id=21)
    task = asyncio.create_task(channel.send(msg))
    await asyncio.wait_for(in_flight.wait(), 10)
    at_the_kill = dict(host.cursors)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    release.set()
    tg_server._dispatch = dispatch  # type: ignore[method-assign]
    restarted, _ = await _restarted(tg_server, at_the_kill)
    try:
        await restarted.send(msg)  # the outbox's retry after the restart
    finally:
        await restarted.stop()
    # Before, the part Telegram had confirmed was saved only when the send failed (an
    # exception, a stop): after a kill the retry sent it again.
    assert len(tg_server.sent_to(OWNER_ID)) == 2


async def test_a_kill_after_every_part_was_confirmed_sends_none_again(
    tg_server: FakeTelegramServer, channel: TelegramChannel, host: RecordingHost
) -> None:
    msg = OutboundMessage("telegram", str(OWNER_ID), _two_parts(), outbox_id=22)
    first = await channel.send(msg)
    assert len(tg_server.sent_to(OWNER_ID)) == 2
    at_the_kill = dict(host.cursors)  # killed before the outbox marked it sent
    restarted, after = await _restarted(tg_server, at_the_kill)
    try:
        # the outbox's retry after the restart: the answer the first send had
        assert await restarted.send(msg) == first
        assert len(tg_server.sent_to(OWNER_ID)) == 2
        nxt = OutboundMessage("telegram", str(OWNER_ID), _two_parts(), outbox_id=23)
        await restarted.send(nxt)
    finally:
        await restarted.stop()
    assert len(tg_server.sent_to(OWNER_ID)) == 4
    # the next message's save dropped it (the outbox had marked it sent by then)
    assert list(json.loads(after.cursors[("telegram", "parts")])) == ["23"]
