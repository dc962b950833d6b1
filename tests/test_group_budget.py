"""What an allow-listed group's members can cost: the model's answers to them are
budgeted per hour and group (trust.group_replies_per_hour); past it their messages are
recorded, not answered, the owner's own still are, and the owner is told once."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.events import utcnow
from bot.resume import resume_pending_replies
from bot.services import open_services
from tests.conftest import (
    OWNER_TELEGRAM_ID,
    RecordingChannel,
    attach_channel,
    make_config,
    owner_identities,
    settle,
    shutdown_services,
)
from tests.support import ScriptedBrain, inbound

FAMILY, CLUB, CHESS = "-100", "-200", "-300"
KIM, LEE = "111", "222"


def _config(tmp_path: Path, **trust: int) -> Any:
    return make_config(
        tmp_path,
        owner={"identities": owner_identities()},
        channels={"telegram": {"enabled": True, "token": "123456:TEST-token"}},
        trust={"group_replies_per_hour": 2, **trust},
    )


async def _open(config: Any, brain: ScriptedBrain) -> tuple[Any, RecordingChannel]:
    services = await open_services(config, brain=brain)
    telegram = RecordingChannel("telegram")
    await attach_channel(services, telegram)
    return services, telegram


async def _say(services: Any, sender: str, text: str, group: str = FAMILY) -> None:
    msg = inbound(text, sender=sender, sender_name=f"member {sender}", chat=group,
                  group_id=group, group_title=f"group {group}")  # fmt: skip
    await services.router.deliver(msg)
    await settle(services)


async def _spend_the_budget(services: Any, brain: ScriptedBrain) -> None:
    """Kim's two answers of the hour, and a third message refused."""
    for text in ("one", "two", "three, refused"):
        await _say(services, KIM, text)
    assert len(brain.requests) == 2


async def _spent_in_a_run(config: Any) -> ScriptedBrain:
    """:func:`_spend_the_budget` in a run that has ended; the run's brain."""
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await _spend_the_budget(services, brain)
    finally:
        await shutdown_services(services)
    return brain


def _notices(telegram: RecordingChannel) -> list[str]:
    return [m.text for m in telegram.sent if m.chat_id == OWNER_TELEGRAM_ID]


def _profiles(brain: ScriptedBrain) -> list[str]:
    return [r.profile for r in brain.requests]


async def _refusals(services: Any, group: str) -> list[str]:
    rec = await services.conversations.pinned_for(f"telegram:group:{group}")
    assert rec is not None
    lines = await services.conversations.store.aread_lines(rec.id)
    return [line["reason"] for line in lines if line.get("event") == "reply_refused"]


async def test_a_groups_members_answers_are_budgeted_per_hour(tmp_path: Path) -> None:
    # Regression: every member's message in an allowed group was a model call, with no
    # limit: a busy or hostile group ran up the owner's bill unbounded.
    brain = ScriptedBrain()
    services, telegram = await _open(_config(tmp_path), brain)
    try:
        await _say(services, OWNER_TELEGRAM_ID, "the owner's, not counted")
        for n in range(3):
            await _say(services, KIM, f"question {n}")
        assert _profiles(brain) == ["owner", "restricted", "restricted"]
        (notice,) = _notices(telegram)
        assert "group_replies_per_hour" in notice and "group -100" in notice
        # per group: another member (or a new account) does not get a budget of its own
        await _say(services, LEE, "a new account")
        assert len(brain.requests) == 3
        assert len(_notices(telegram)) == 1  # told once an hour, not per message
        # the owner's own messages there are still answered
        await _say(services, OWNER_TELEGRAM_ID, "still me")
        assert _profiles(brain)[-1] == "owner"
        # another group has its own budget
        await _say(services, KIM, "in the club", group=CLUB)
        assert brain.requests[-1].text == "in the club"
        conv = brain.requests[0].conversation_id
        assert conv is not None
        said = [t for t in await services.conversations.read_turns(conv) if t["role"] == "user"]
        assert len(said) == 6  # nothing received is lost
    finally:
        await shutdown_services(services)


async def test_a_refused_member_message_is_not_answered_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refusal is recorded (a reply_refused event): recovery found the refused turn
    # unanswered and would answer it at the next start, the budget's bill after all. And
    # the count comes from the index and the transcript: a restart resets nothing.
    config = _config(tmp_path)
    brain = await _spent_in_a_run(config)
    services = await open_services(config, brain=brain)
    try:
        assert services.recovery is not None and services.recovery.pending_replies == []
        await resume_pending_replies(services)
        await attach_channel(services, RecordingChannel("telegram"))
        await _say(services, LEE, "still within the hour")
        assert len(brain.requests) == 2  # counted across the restart
        # an hour later the budget is free again, and only for new messages
        later = utcnow() + timedelta(hours=2)
        monkeypatch.setattr("bot.group_budget.utcnow", lambda: later)
        await _say(services, LEE, "later")
        assert [r.text for r in brain.requests][2:] == ["later"]
    finally:
        await shutdown_services(services)


async def test_all_groups_members_answers_are_budgeted_together(tmp_path: Path) -> None:
    # Regression: the budget was per group only; an owner who allowed ten groups could
    # be charged ten budgets an hour by strangers (trust.group_replies_per_hour_total).
    config = _config(tmp_path, group_replies_per_hour_total=3)
    brain = ScriptedBrain()
    services, telegram = await _open(config, brain)
    try:
        await _say(services, KIM, "one", group=FAMILY)
        await _say(services, KIM, "two", group=FAMILY)
        await _say(services, LEE, "three", group=CLUB)
        await _say(services, OWNER_TELEGRAM_ID, "the owner's, not counted", group=CLUB)
        await _say(services, LEE, "four, refused", group=CLUB)  # the club's first 2: total
        await _say(services, KIM, "five, refused", group=CHESS)  # a group not heard yet
        said = ["one", "two", "three", "the owner's, not counted"]
        assert [r.text for r in brain.requests] == said
        assert await _refusals(services, CLUB) == ["group_replies_per_hour_total"]
        assert await _refusals(services, CHESS) == ["group_replies_per_hour_total"]
        (notice,) = _notices(telegram)  # once for all groups, not per group or message
        assert "group_replies_per_hour_total" in notice and "3 answers" in notice
    finally:
        await shutdown_services(services)
    services, telegram = await _open(config, brain)
    try:
        assert services.recovery is not None and services.recovery.pending_replies == []
        await _say(services, LEE, "after a restart", group=CHESS)
        assert len(brain.requests) == 4  # counted across the restart
        assert _notices(telegram) == []  # and told once an hour across restarts too
        await _say(services, OWNER_TELEGRAM_ID, "mine, still answered", group=CHESS)
        assert brain.requests[-1].text == "mine, still answered"
    finally:
        await shutdown_services(services)


async def test_answers_being_made_in_other_groups_count_towards_the_total(
    tmp_path: Path,
) -> None:
    # Two groups' members asking at once: each check saw the other's answer not yet in
    # the index, and both were answered past the total.
    brain = ScriptedBrain()
    brain.gate = asyncio.Event()
    services, telegram = await _open(_config(tmp_path, group_replies_per_hour_total=1), brain)
    try:
        for group in (FAMILY, CLUB):
            msg = inbound("at once", sender=KIM, chat=group, group_id=group, group_title=group)
            await services.router.deliver(msg)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not _notices(telegram) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        brain.gate.set()
        await settle(services)
        assert len(brain.requests) == 1
        refused = await _refusals(services, FAMILY) + await _refusals(services, CLUB)
        assert refused == ["group_replies_per_hour_total"]
    finally:
        brain.gate.set()
        await shutdown_services(services)


async def test_the_owners_new_in_a_group_does_not_refill_its_budget(tmp_path: Path) -> None:
    # The budget was counted per conversation: the owner's /new there (a fresh one)
    # gave the group's members a whole new hour's budget.
    brain = ScriptedBrain()
    services, _ = await _open(_config(tmp_path), brain)
    try:
        await _say(services, KIM, "one")
        await _say(services, KIM, "two")
        await _say(services, OWNER_TELEGRAM_ID, "/new")
        await _say(services, KIM, "three, refused")
        assert [r.text for r in brain.requests] == ["one", "two"]
        assert await _refusals(services, FAMILY) == ["group_replies_per_hour"]
    finally:
        await shutdown_services(services)


async def test_the_hours_answers_are_read_once_a_run_not_at_every_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: every member's message read the hour's answers from the index (a scan
    # of the hour's turns, a row per answer) and their transcripts, so each message of a
    # busy hour cost more than the one before: `bench ingest` with a raised budget ran
    # for minutes on it. The ledger is read at the first check of a run, then kept.
    from bot import group_budget

    config = _config(tmp_path, group_replies_per_hour=50, group_replies_per_hour_total=50)
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    reads: list[str] = []
    fetchall = services.index_db.fetchall

    async def counted(sql: str, *args: Any, **kwargs: Any) -> Any:
        if sql == group_budget.ANSWERED:
            reads.append(sql)
        return await fetchall(sql, *args, **kwargs)

    monkeypatch.setattr(services.index_db, "fetchall", counted)
    try:
        for n in range(4):
            await _say(services, KIM, f"question {n}", group=FAMILY if n % 2 else CLUB)
        assert len(brain.requests) == 4
        assert len(reads) == 1
    finally:
        await shutdown_services(services)


async def test_answers_allowed_before_a_clock_set_back_do_not_spend_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 40): the ledger (and its seed from the index) kept answers
    # stamped in the future: a clock set back by a day kept the group silent for a day.
    config = _config(tmp_path)
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await _spend_the_budget(services, brain)
        earlier = utcnow() - timedelta(days=1)
        monkeypatch.setattr("bot.group_budget.utcnow", lambda: earlier)
        monkeypatch.setattr("bot.events.utcnow", lambda: earlier)
        await _say(services, LEE, "after the set-back")
        assert [r.text for r in brain.requests][2:] == ["after the set-back"]
    finally:
        await shutdown_services(services)
    # a start after the set-back reads the hour from the index: the same
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await _say(services, LEE, "after a restart")
        assert [r.text for r in brain.requests] == ["after a restart"]
    finally:
        await shutdown_services(services)


async def test_an_answer_whose_time_is_none_is_left_out_of_the_hour(tmp_path: Path) -> None:
    # Regression (session 42): an answer of the hour whose time in the index is no time
    # (a second of 99, which the hour's bounds, compared as text, let through) raised
    # ValueError at every member's message of the run: none was answered. It is left out.
    config = _config(tmp_path)
    brain = await _spent_in_a_run(config)
    brain = ScriptedBrain()
    services, _ = await _open(config, brain)
    try:
        await services.index_db.execute(
            "UPDATE turns SET timestamp = substr(timestamp, 1, 17) || '99' || substr(timestamp, 20)"
            " WHERE id = (SELECT max(id) FROM turns WHERE role = 'assistant')"
        )
        await _say(services, LEE, "one left in the hour")
        await _say(services, LEE, "refused")
        assert [r.text for r in brain.requests] == ["one left in the hour"]
    finally:
        await shutdown_services(services)
