"""A known contact's answers (bot/known_answers.py) go out only while they are known: one
the owner blocks (or sets untrusted) while their answers wait for their turn, the model
or the channel gets none of them, and nothing they sent is lost."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.health_store import outbox_counts
from bot.parties import party_handle
from bot.services import open_services
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound, wait_until

KIM = "7001"
PARTY = party_handle("telegram", KIM)


async def _open(tmp_path: Path, brain: ScriptedBrain) -> tuple[Any, RecordingChannel]:
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {KIM: "known"}}})
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    return services, telegram


def _file(services: Any) -> list[dict[str, Any]]:
    path = services.config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("command", [f"/block {PARTY}", f"/trust {PARTY} untrusted"])
async def test_answers_waiting_when_the_owner_blocks_a_contact_are_not_sent(
    tmp_path: Path, command: str
) -> None:
    # Regression (session 40): the answers queued behind each other (or waiting for the
    # model) were made and sent with the party's tier as read at their arrival: the owner
    # was told "their messages are kept but never answered", and all of them went out.
    brain = ScriptedBrain()
    brain.gate = asyncio.Event()  # the model is slow: the first answer is being made
    services, telegram = await _open(tmp_path, brain)
    try:
        for n in range(3):
            await services.router.deliver(inbound(f"line {n}", sender=KIM, message_id=f"k{n}"))
        await asyncio.wait_for(brain.started.wait(), 10)
        await services.router.deliver(inbound(command, sender=OWNER_TELEGRAM_ID))
        await wait_until(lambda: telegram.texts("command"), what="the owner's command answered")
        brain.gate.set()
        await settle(services)
        assert [m for m in telegram.sent if m.chat_id == KIM] == []
        assert len(brain.requests) == 1  # the one being made; the others never were
        lines = _file(services)
        said = [m["content"] for m in lines if m.get("direction") == "in"]
        assert said == ["line 0", "line 1", "line 2"]  # nothing received is lost
        assert not [m for m in lines if m.get("direction") == "out"]
        # each is recorded as not answered: a restart does not answer them either
        refused = {(e["ref"], e["reason"]) for e in lines if e.get("event") == "refused"}
        tier = "blocked" if "block" in command else "untrusted"
        assert refused == {(f"k{n}", f"tier:{tier}") for n in range(3)}
    finally:
        await shutdown_services(services)


async def test_an_answer_held_in_the_outbox_is_withdrawn_when_the_contact_is_blocked(
    tmp_path: Path,
) -> None:
    # Regression (session 40): an answer already queued while the channel was down went
    # out once it was back, to a party blocked meanwhile (the dashboard's Block here:
    # /block and /trust take the same way, ExternalStore.set_tier).
    brain = ScriptedBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        telegram.unreachable = True
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await services.router.deliver(inbound("/help", sender=KIM, message_id="k1"))
        await wait_until(lambda: telegram.attempts >= 2, what="the sends tried")
        await services.external.set_tier(PARTY, "blocked")
        telegram.unreachable = False
        await services.outbox.reachable("telegram")
        await settle(services)
        # the model's answer is taken back; the answer to their command still goes
        assert [m.kind for m in telegram.sent if m.chat_id == KIM] == ["command"]
        row = await services.state.fetchone(
            "SELECT status, last_error FROM outbox WHERE dedup_key = ?", ("telegram:k0:reply",)
        )
        assert row[0] == "failed" and row[1].startswith("withdrawn: ")
        # not a failure `my-agent status` reports
        assert outbox_counts(services.config.data_dir / "state.db")["failed"] == 0
    finally:
        await shutdown_services(services)


async def test_answers_made_back_to_back_keep_what_the_contact_said(tmp_path: Path) -> None:
    # Regression (session 40): the exchange was the newest 20 rows with our answers made
    # after the message (while it waited its turn) among them: the answer to the 12th
    # line of a burst read 11 answers and only lines 3-10 (and a flood's 40th nothing
    # at all, the leading answers dropped by restricted_messages).
    brain = ScriptedBrain()
    brain.gate = asyncio.Event()  # all of them arrive while the first answer is made
    services, telegram = await _open(tmp_path, brain)
    try:
        for n in range(25):
            await services.router.deliver(inbound(f"line {n}", sender=KIM, message_id=f"k{n}"))
        await asyncio.wait_for(brain.started.wait(), 10)
        brain.gate.set()
        await settle(services)
        assert len(telegram.texts("reply")) == 25
        for n, request in enumerate(brain.requests):
            assert request.text == f"line {n}"
            said = [h.content for h in request.history if h.role == "user"]
            ours = [h.content for h in request.history if h.role == "assistant"]
            # their own words, the 20 newest rows up to it (itself the last)
            assert said == [f"line {k}" for k in range(max(0, n - 19), n)]
            # and the 20 newest of our answers made since it came: to their earlier
            # lines, never a later one's, after what they said (as they were made)
            assert ours == [f"re: line {k}" for k in range(max(0, n - 20), n)]
            assert [h.role for h in request.history] == ["user"] * len(said) + ["assistant"] * len(
                ours
            )
    finally:
        await shutdown_services(services)


class CancelledBrain(ScriptedBrain):
    """A model call that never ends by itself (``gate`` never set): counts how many of
    its calls were cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.cancelled = 0

    async def reply(self, request: Any, on_delta: Any = None) -> Any:
        try:
            return await super().reply(request, on_delta)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_the_answer_being_made_is_stopped_when_the_owner_blocks(tmp_path: Path) -> None:
    # Regression (session 41): the model call ran to its end, paid for, and the answer
    # was then dropped (session 40 read their tier again before sending it).
    brain = CancelledBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        await services.router.deliver(inbound("the address?", sender=KIM, message_id="k0"))
        await asyncio.wait_for(brain.started.wait(), 10)
        await services.router.deliver(inbound(f"/block {PARTY}", sender=OWNER_TELEGRAM_ID))
        await settle(services)  # the answer's job ends: the model's answer is not awaited
        assert brain.cancelled == 1
        assert [m for m in telegram.sent if m.chat_id == KIM] == []
        lines = _file(services)
        assert [m["content"] for m in lines if m.get("direction") == "in"] == ["the address?"]
        refused = [(e["ref"], e["reason"]) for e in lines if e.get("event") == "refused"]
        assert refused == [("k0", "tier:blocked")]
    finally:
        await shutdown_services(services)


async def test_a_stopped_answer_is_not_sent_when_the_contact_is_trusted_again(
    tmp_path: Path,
) -> None:
    brain = CancelledBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        await services.router.deliver(inbound("the address?", sender=KIM, message_id="k0"))
        await asyncio.wait_for(brain.started.wait(), 10)
        # the owner blocks them and trusts them again before the stopped answer takes
        # their lock: the block's tier_changed, their record known as it is again now
        party = await services.external.get(PARTY)
        assert party is not None
        await services.router.strangers.withdraw_answers(replace(party, tier="blocked"))
        await settle(services)
        assert brain.cancelled == 1
        assert [m for m in telegram.sent if m.chat_id == KIM] == []  # not "[stopped]"
        refused = [(e["ref"], e["reason"]) for e in _file(services) if e.get("event") == "refused"]
        assert refused == [("k0", "stopped")]
    finally:
        await shutdown_services(services)


async def test_a_withdrawn_answer_is_not_read_as_said(tmp_path: Path) -> None:
    # Regression (session 41): the answer withdrawn from the outbox stayed in their
    # file as sent: the dashboard showed it said to them, and once they were trusted
    # again the model read it in their exchange as something it had told them.
    brain = ScriptedBrain()
    services, telegram = await _open(tmp_path, brain)
    try:
        telegram.unreachable = True
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await wait_until(lambda: telegram.attempts >= 1, what="the send tried")
        await services.external.set_tier(PARTY, "blocked")
        await settle(services)
        lines = _file(services)
        (answer,) = [m for m in lines if m.get("direction") == "out"]
        (event,) = [e for e in lines if e.get("event") == "withdrawn"]
        assert (event["answers"], event["at"]) == ("k0", answer["timestamp"])
        assert event["reason"] == "tier:blocked"
        # the dashboard's row says so (and the hourly budget still counts it: paid)
        rows = await services.external.messages(PARTY)
        assert [r["kind"] for r in rows if r["direction"] == "out"] == ["withdrawn"]
        assert await services.external.answers_since("2000-01-01T00:00:00.000Z", PARTY) == 1
        # trusted again: their next answer's context has what they said, not our answer
        await services.external.set_tier(PARTY, "known")
        telegram.unreachable = False
        await services.outbox.reachable("telegram")
        await services.router.deliver(inbound("still there?", sender=KIM, message_id="k1"))
        await settle(services)
        assert [(h.role, h.content) for h in brain.requests[-1].history] == [("user", "hello")]
        assert [m.text for m in telegram.sent if m.chat_id == KIM] == ["re: still there?"]
    finally:
        await shutdown_services(services)
