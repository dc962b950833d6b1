"""Outages: retries with backoff and jitter within the budget, then BrainUnavailable."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from bot.bench.fakes.anthropic_api import Block, FakeAnthropicAPI, Scripted
from bot.brain.anthropic import AnthropicBrain
from bot.brain.anthropic_api import UnreadableAnswer
from bot.brain.anthropic_reply import REFUSED_REPLY
from bot.brain.base import BrainRequest, BrainUnavailable, RequestRefused
from tests.brain.conftest import Deltas, ManualClock, make_brain, make_config, seed_conversation


def request(conv_id: str, text: str) -> BrainRequest:
    return BrainRequest(
        profile="owner", channel="web", text=text, model_alias="sonnet", conversation_id=conv_id
    )


async def test_529_then_success(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(529)
    fake_api.push_error(500)
    fake_api.push_text("Back again.", chunks=["Back ", "again."])
    deltas = Deltas()
    reply = await brain.reply(request(conv, "hello"), deltas)
    assert reply.text == "Back again." and deltas.items == ["Back ", "again."]
    assert len(fake_api.requests) == 3
    assert fake_api.requests[0].body == fake_api.requests[2].body  # the same request resent
    # full jitter: 0 <= delay <= base * 2**attempt
    assert len(clock.sleeps) == 2
    assert 0 <= clock.sleeps[0] <= 0.5 and 0 <= clock.sleeps[1] <= 1.0


async def test_429_honours_retry_after(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(429, retry_after=3)
    fake_api.push_text("ok")
    reply = await brain.reply(request(conv, "hello"))
    assert reply.text == "ok"
    assert clock.sleeps == [3.0]


async def test_retry_after_beyond_budget_gives_up_at_once(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(429, retry_after=600)
    with pytest.raises(BrainUnavailable):
        await brain.reply(request(conv, "hello"))
    assert clock.sleeps == [] and len(fake_api.requests) == 1


async def test_long_outage_raises_within_budget(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.down_for(3600)
    start = clock.now
    with pytest.raises(BrainUnavailable, match="529"):
        await brain.reply(request(conv, "hello"))
    assert clock.now - start <= brain.config.brain.retry_budget_seconds
    assert len(fake_api.requests) >= 3  # it did retry
    assert len(fake_api.requests) == len(clock.sleeps) + 1


async def test_real_time_outage_with_tiny_budget(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    """Real clock and sleeps: a 0.3 s budget ends in BrainUnavailable, and once the API
    is back the same request succeeds."""
    config = make_config(
        tmp_path, fake_api, retry_budget_seconds=0.3, retry_base_delay=0.05, retry_max_delay=0.1
    )
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "hello")])
        fake_api.down_for(3600, status=503)
        with pytest.raises(BrainUnavailable):
            await asyncio.wait_for(brain.reply(request(conv, "hello")), 5)
        fake_api.up()
        fake_api.push_text("finally")
        assert (await brain.reply(request(conv, "hello"))).text == "finally"
    finally:
        await brain.client.close()


async def test_connection_refused_is_unavailable(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api, retry_budget_seconds=0.2, retry_base_delay=0.05)
    await fake_api.close()  # nothing listens on the port any more
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "hello")])
        with pytest.raises(BrainUnavailable, match="APIConnectionError"):
            await brain.reply(request(conv, "hello"))
    finally:
        await brain.client.close()


@pytest.mark.parametrize(
    "stalled",
    [
        Scripted([Block("text", text="late")], delay=1.0),  # no answer within the timeout
        # Regression: the SDK's timeout is per read and each keep-alive ping resets it, so
        # a stream that only pinged held the reply for as long as it pinged (no notice, no
        # retry), then sent an empty reply.
        Scripted([Block("text", text="never")], ping_seconds=30),
    ],
    ids=["slow", "pings-only"],
)
async def test_a_stalled_call_is_abandoned_and_retried(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace, stalled: Scripted
) -> None:
    config = make_config(tmp_path, fake_api, request_timeout=0.6, retry_base_delay=0.01)
    brain = make_brain(config, core)
    try:
        conv = await seed_conversation(core, [("user", "hello")])
        fake_api.push(stalled)
        fake_api.push_text("on time")
        deltas = Deltas()
        started = asyncio.get_running_loop().time()
        reply = await brain.reply(request(conv, "hello"), deltas)
        assert reply.text == deltas.text == "on time"
        assert asyncio.get_running_loop().time() - started < 10  # not the 30 s of pings
        assert len(fake_api.requests) == 2
    finally:
        await brain.client.close()


async def test_auth_error_is_unavailable_without_retrying(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(401, message="invalid x-api-key")
    with pytest.raises(BrainUnavailable, match="401"):
        await brain.reply(request(conv, "hello"))
    assert len(fake_api.requests) == 1 and clock.sleeps == []


async def test_rejected_request_becomes_a_notice_not_a_retry_loop(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push_error(400, message="messages: text content blocks must be non-empty")
    reply = await brain.reply(request(conv, "hello"))
    assert "rejected the request (400)" in reply.text
    assert reply.extra == {"error": "rejected", "status": 400}
    assert len(fake_api.requests) == 1


async def test_failure_mid_stream_does_not_repeat_deltas(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    conv = await seed_conversation(core, [("user", "hello")])
    chunks = ["The ", "answer ", "is ", "42."]
    fake_api.push(
        Scripted([Block("text", text="The answer is 42.", chunks=chunks)], fail_after_deltas=2)
    )
    fake_api.push_text("The answer is 42.", chunks=chunks)
    deltas = Deltas()
    reply = await brain.reply(request(conv, "hello"), deltas)
    assert reply.text == "The answer is 42."
    assert deltas.text == "The answer is 42."  # "The answer " was not sent twice
    assert len(fake_api.requests) == 2


async def test_complete_retries_then_raises(
    brain: AnthropicBrain, fake_api: FakeAnthropicAPI, clock: ManualClock
) -> None:
    fake_api.push_error(529)
    fake_api.push_text("a title")
    assert await brain.complete(system="s", prompt="p") == "a title"
    assert len(clock.sleeps) == 1
    fake_api.down_for(3600)
    with pytest.raises(BrainUnavailable):
        await brain.complete(system="s", prompt="p")
    fake_api.up()
    fake_api.push_error(400)  # this request itself: no outage (the notes are written offline)
    with pytest.raises(RequestRefused, match="refused"):
        await brain.complete(system="s", prompt="p")
    fake_api.push_error(401)  # the key: the service is unusable, an outage for the queue
    with pytest.raises(BrainUnavailable):
        await brain.complete(system="s", prompt="p")


async def test_an_empty_answer_becomes_a_labelled_notice(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: a refusal (no content) or a blank answer was sent as an empty reply.
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(Scripted([], stop_reason="refusal"))
    reply = await brain.reply(request(conv, "hello"), Deltas())
    assert reply.text == REFUSED_REPLY  # a notice, and one that says the model declined
    assert reply.extra == {"error": "empty", "stopReason": "refusal"}


@pytest.mark.parametrize("cut", ["eof", "reset"])
async def test_a_stream_cut_before_message_stop_is_retried(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI, cut: str
) -> None:
    # Regression: a stream that ended cleanly before message_stop was taken as the whole
    # answer (half a reply stored and sent as if complete), and a connection dropped
    # mid-stream raised the HTTP library's own error, which nothing retried: the owner
    # got "something went wrong" and the reply was never produced.
    conv = await seed_conversation(core, [("user", "hello")])
    chunks = ["The ", "answer ", "is ", "42."]
    fake_api.push(
        Scripted(
            [Block("text", text="The answer is 42.", chunks=chunks)],
            cut_after_deltas=2,
            cut=cut,  # type: ignore[arg-type]
        )
    )
    fake_api.push_text("The answer is 42.", chunks=chunks)
    deltas = Deltas()
    reply = await brain.reply(request(conv, "hello"), deltas)
    assert reply.text == "The answer is 42."
    assert deltas.text == "The answer is 42."
    assert len(fake_api.requests) == 2


async def test_an_answer_the_sdk_cannot_read_is_asked_again(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: the SDK's ValueError for a stream it could not read escaped as is: no
    # retry, the owner got the apology and their question was never answered. (Tool
    # input that is not JSON is answered to the model instead: test_tool_rounds.)
    conv = await seed_conversation(core, [("user", "hello")])
    garbled = Scripted([Block("text", text="Here it is.")], garble_after_deltas=0)
    fake_api.push(garbled)
    fake_api.push_text("Here it is.")
    reply = await brain.reply(request(conv, "hello"), Deltas())
    assert reply.text == "Here it is." and len(fake_api.requests) == 2
    # Always garbled: a few attempts, then a failure (not an outage to wait out).
    for _ in range(3):
        fake_api.push(garbled)
    with pytest.raises(UnreadableAnswer):
        await brain.reply(request(conv, "hello"), Deltas())
    assert len(fake_api.requests) == 5


async def test_the_attempt_after_a_long_outage_gets_time_to_answer(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    # Regression: each attempt's timeout was what was left of the retry budget, at least
    # 0.5 s. After an outage that used most of the budget the API came back, the attempt
    # that would have answered (a model that takes a few seconds to start on a long
    # context) timed out at once, and the owner was told the service was unavailable.
    config = make_config(
        tmp_path, fake_api, retry_budget_seconds=10.0, request_timeout=30.0, retry_max_delay=10.0
    )
    clock = ManualClock()
    brain = make_brain(config, core, clock)
    try:
        conv = await seed_conversation(core, [("user", "hello")])
        fake_api.push_error(529, retry_after=9.5)  # overloaded: come back in 9.5 s
        fake_api.push(Scripted([Block("text", text="back")], delay=1.5))  # slow to start
        deltas = Deltas()
        reply = await brain.reply(request(conv, "hello"), deltas)
        assert reply.text == deltas.text == "back"
        assert len(fake_api.requests) == 2
    finally:
        await brain.client.close()


@pytest.mark.parametrize(
    ("error_type", "raised"),
    [("invalid_request_error", None), ("authentication_error", "401"), ("billing_error", "402")],
)
async def test_an_error_mid_stream_is_classed_by_its_type(
    brain: AnthropicBrain,
    core: SimpleNamespace,
    fake_api: FakeAnthropicAPI,
    clock: ManualClock,
    error_type: str,
    raised: str | None,
) -> None:
    # Regression: an error frame inside a stream arrives after the 200, and the SDK's
    # exception carries status 200, which the retry policy took for an outage whatever
    # the error: an invalid request or a refused key was retried for the whole budget,
    # then reported as an outage, and the pending reply retried it every 30 s for ever.
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(
        Scripted(
            [Block("text", text="The answer", chunks=["The ", "answer"])],
            fail_after_deltas=1,
            error_type=error_type,
            error_message=f"{error_type} mid-stream",
        )
    )
    if raised is None:  # the request itself: a notice, as for a 400 before the stream
        reply = await brain.reply(request(conv, "hello"))
        assert reply.extra["error"] == "rejected" and reply.extra["status"] == 400
    else:  # the key or the account: refused at once, no retry
        with pytest.raises(BrainUnavailable, match=raised):
            await brain.reply(request(conv, "hello"))
    assert len(fake_api.requests) == 1 and clock.sleeps == []


async def test_a_retry_that_words_it_differently_is_not_spliced_onto_the_first(
    brain: AnthropicBrain, core: SimpleNamespace, fake_api: FakeAnthropicAPI
) -> None:
    # Regression: after a failure mid-stream the retry's deltas were forwarded past the
    # length already sent, whatever they said: the model words a retry differently, and
    # the watcher saw "The answer " + "42." (the end of "Well, it is 42."), text the model
    # never wrote. Now what was sent is only continued while the retry repeats it.
    conv = await seed_conversation(core, [("user", "hello")])
    fake_api.push(
        Scripted(
            [Block("text", text="The answer is 42.", chunks=["The ", "answer ", "is 42."])],
            fail_after_deltas=2,
        )
    )
    fake_api.push_text("Well, it is 42.", chunks=["Well, ", "it is ", "42."])
    deltas = Deltas()
    reply = await brain.reply(request(conv, "hello"), deltas)
    assert reply.text == "Well, it is 42."  # the stored reply is the retry's, whole
    assert deltas.text == "The answer "  # held, not spliced: the final turn replaces it
    assert len(fake_api.requests) == 2
