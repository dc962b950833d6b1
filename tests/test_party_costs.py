"""What the model's answers to known contacts cost (bot/known_answers.py): kept on their
lines in the party's file, summed per party in the index (migration 15), rebuilt from the
files, and shown alike by /status and the dashboard's Analytics. Before session 40 these
paid calls were recorded nowhere."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bot.brain.base import BrainReply, BrainRequest, BrainUnavailable, Usage
from bot.command_status import PARTY_COSTS_PREFIX, party_costs_line, status_answer
from bot.parties import party_handle
from bot.party_reads import PartyCosts
from bot.party_rescue import removed_party_path
from bot.services import open_services
from channels.web.analytics import Analytics
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


def _config(tmp_path: Path) -> Any:
    return telegram_config(tmp_path, trust={"contacts": {"telegram": {KIM: "known"}}})


async def _open(config: Any, brain: Any) -> tuple[Any, RecordingChannel]:
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    return services, telegram


def _file(config: Any) -> list[dict[str, Any]]:
    path = config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _shown(services: Any) -> tuple[PartyCosts, str | None, dict[str, Any]]:
    """The index's sums, /status's line and /api/analytics's ``parties``."""
    costs = await services.external.answer_costs()
    line = await party_costs_line(services)
    web = SimpleNamespace(services=services, config=services.config)
    totals = await Analytics(web).totals()  # type: ignore[arg-type]
    return costs, line, totals["parties"]


async def test_a_known_contacts_answers_are_costed_in_their_file_status_and_analytics(
    tmp_path: Path,
) -> None:
    # Regression (session 40): the restricted brain's answers to a known contact were
    # paid calls recorded nowhere: their out lines had no model, usage nor cost, and
    # /status and the Analytics panel counted conversations only.
    config = _config(tmp_path)
    services, telegram = await _open(config, ScriptedBrain())
    try:
        assert await party_costs_line(services) is None  # nothing spent: no line
        for n, text in enumerate(("hello", "hi")):
            await services.router.deliver(inbound(text, sender=KIM, message_id=f"k{n}"))
            await settle(services)
        assert telegram.texts("reply") == ["re: hello", "re: hi"]
        out = [m for m in _file(config) if m.get("direction") == "out"]
        # as an assistant turn records them (ScriptedBrain: 100 + len(text) in, 20 out)
        assert [(m["model"], m["usage"], m["cost"]) for m in out] == [
            ("scripted-model", {"input": 105, "output": 20}, 0.0015),
            ("scripted-model", {"input": 102, "output": 20}, 0.0015),
        ]
        party = await services.external.get(PARTY)
        assert party is not None
        assert (party.tokens_in, party.tokens_out, party.cost_total) == (207, 40, 0.003)
        costs, line, analytics = await _shown(services)
        assert costs == PartyCosts(0.003, 207, 40, 1)
        # /status and the dashboard say the same figures
        assert line == f"{PARTY_COSTS_PREFIX}$0.0030 (207 in / 40 out tokens, 1 contact, all time)"
        assert analytics == {"cost": 0.003, "tokensIn": 207, "tokensOut": 40, "parties": 1}
        lines, _ = await status_answer(services, "telegram", None, owner_only=True)
        assert line in lines
        group, _ = await status_answer(services, "telegram", None, owner_only=False)
        assert line not in group  # the owner's to know, not a group's
    finally:
        await shutdown_services(services)

    config.index_path.unlink()  # a reindex: the index rebuilt from the files at start
    services, _ = await _open(config, ScriptedBrain())
    try:
        assert await _shown(services) == (costs, line, analytics)
    finally:
        await shutdown_services(services)


class RoundThenWaits(ScriptedBrain):
    """A tool round made (and paid: on the request's ``spend``, as the Anthropic brain
    keeps it), then a model call that waits for ``gate``."""

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        assert request.spend is not None
        request.spend.add(Usage(106, 20), 0.0015)
        return await super().reply(request, on_delta)


async def test_an_answer_dropped_when_the_owner_blocks_the_contact_is_still_counted(
    tmp_path: Path,
) -> None:
    # The owner blocks the contact while the model makes its answer: the answer is not
    # sent (session 40), and stopped (session 41), but what its calls had cost by then
    # was paid, so its refusal carries it.
    config = _config(tmp_path)
    brain = RoundThenWaits()
    brain.gate = asyncio.Event()
    services, telegram = await _open(config, brain)
    try:
        for n in range(2):
            await services.router.deliver(inbound(f"line {n}", sender=KIM, message_id=f"k{n}"))
        await asyncio.wait_for(brain.started.wait(), 10)
        await services.router.deliver(inbound(f"/block {PARTY}", sender=OWNER_TELEGRAM_ID))
        await wait_until(lambda: telegram.texts("command"), what="the owner's command answered")
        brain.gate.set()
        await settle(services)
        assert not telegram.texts("reply")
        refused = {e["ref"]: e for e in _file(config) if e.get("event") == "refused"}
        assert refused["k0"]["usage"] == {"input": 106, "output": 20}
        assert refused["k0"]["cost"] == 0.0015 and refused["k0"]["model"] == "stopped"
        assert refused["k0"]["reason"] == "tier:blocked"
        assert "usage" not in refused["k1"]  # never asked of the model: nothing spent
        costs, line, analytics = await _shown(services)
        assert costs == PartyCosts(0.0015, 106, 20, 1)
        assert line and "$0.0015 (106 in / 20 out tokens" in line
        assert analytics["tokensIn"] == 106
    finally:
        await shutdown_services(services)


class OutageBrain:
    """Spends on a first attempt that the model's outage ends, then answers: as the
    Anthropic brain keeps every call's usage on the request's ``spend``."""

    name = "outage"

    def __init__(self) -> None:
        self.calls = 0

    async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
        self.calls += 1
        assert request.spend is not None
        if self.calls == 1:
            request.spend.add(Usage(500, 10, cache_read=1000), 0.002)
            raise BrainUnavailable("overloaded")
        request.spend.add(Usage(300, 30), 0.001)
        return BrainReply(text="back", model="claude-x", usage=Usage(300, 30), cost=0.001)

    async def close(self) -> None:
        return None


async def test_an_answer_that_waited_out_an_outage_counts_every_attempt(tmp_path: Path) -> None:
    config = _config(tmp_path)
    services, telegram = await _open(config, OutageBrain())

    async def no_wait(seconds: float) -> None:
        await asyncio.sleep(0)

    services.replies.generation.sleep = no_wait
    try:
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await settle(services)
        assert telegram.texts("reply") == ["back"]
        (out,) = [m for m in _file(config) if m.get("direction") == "out"]
        assert out["usage"] == {"input": 800, "output": 40, "cacheRead": 1000}
        assert out["cost"] == 0.003
        costs = await services.external.answer_costs()
        assert costs == PartyCosts(0.003, 1800, 40, 1)  # the cache's tokens are input
    finally:
        await shutdown_services(services)


async def test_an_unpriced_answer_has_tokens_and_no_cost(tmp_path: Path) -> None:
    class Unpriced(ScriptedBrain):
        async def reply(self, request: BrainRequest, on_delta: Any = None) -> BrainReply:
            made = await super().reply(request, on_delta)
            return BrainReply(text=made.text, model=made.model, usage=made.usage, cost=None)

    config = _config(tmp_path)
    services, _ = await _open(config, Unpriced())
    try:
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await settle(services)
        (out,) = [m for m in _file(config) if m.get("direction") == "out"]
        assert "cost" not in out and out["usage"] == {"input": 105, "output": 20}  # as turns
        assert await services.external.answer_costs() == PartyCosts(0.0, 105, 20, 1)
    finally:
        await shutdown_services(services)


async def test_a_rescued_party_record_keeps_what_its_answers_cost(tmp_path: Path) -> None:
    # A record deleted while stopped is written back from the index (bot/party_rescue.py),
    # whose messages carry no usage: its meta line carries the sums, so put back, the
    # party's cost is whole again.
    config = _config(tmp_path)
    services, _ = await _open(config, ScriptedBrain())
    try:
        await services.router.deliver(inbound("hello", sender=KIM, message_id="k0"))
        await settle(services)
        before = await services.external.answer_costs()
    finally:
        await shutdown_services(services)
    record = config.external_dir / f"{PARTY}.jsonl"
    record.unlink()
    services, _ = await _open(config, ScriptedBrain())
    try:
        assert await services.external.answer_costs() == PartyCosts()  # forgotten
    finally:
        await shutdown_services(services)
    shutil.move(removed_party_path(config.external_dir, PARTY), record)
    services, _ = await _open(config, ScriptedBrain())
    try:
        assert before == PartyCosts(0.0015, 105, 20, 1)
        assert await services.external.answer_costs() == before
    finally:
        await shutdown_services(services)
