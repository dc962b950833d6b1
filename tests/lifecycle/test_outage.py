"""The model failing for hours (an outage, the key's account out of credit): the
abbreviation retries once a sweep period, warns once a period, and after
OFFLINE_AFTER_FAILURES failures in a row the offline notes stand in, still owed to the
model, so the conversations of the outage stay findable."""

from __future__ import annotations

import logging
import tracemalloc

import pytest

from bot.brain.base import BrainUnavailable
from bot.extractive import HEADER
from bot.lifecycle import ManualClock
from bot.lifecycle.records import pending_abbreviations, unnamed
from bot.recovery import delete_index, recover

from .conftest import Core, MakeLifecycle, RecordingVectors, ScriptedModel, unavailable


async def _chatted(core: Core, turns: int = 2) -> str:
    rec = await core.manager.create("web")
    await core.chat(rec.id, turns)
    return rec.id


async def _sweeps(clock: ManualClock, lifecycle: object, count: int) -> None:
    for _ in range(count):
        clock.advance(300)  # conversations.abbreviation_sweep_seconds
        await lifecycle.run_due()  # type: ignore[attr-defined]


async def test_a_long_outage_gives_offline_notes_until_the_model_answers(
    core: Core,
    clock: ManualClock,
    make_lifecycle: MakeLifecycle,
    model: ScriptedModel,
    vectors: RecordingVectors,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression: a failing model left every conversation since without notes (no
    # semantic search over them) for as long as it failed, hours or days.
    caplog.set_level(logging.WARNING, "my_agent.lifecycle")
    model.abbreviation = unavailable()
    lifecycle = await make_lifecycle(model)
    convs = [await _chatted(core) for _ in range(4)]
    await _sweeps(clock, lifecycle, 3)  # idle at 600 s: failures 1, 2 (the rest deferred)
    assert model.count("abbreviation") == 2
    assert [(await core.row(c)).abbreviation for c in convs] == [None] * 4
    await _sweeps(clock, lifecycle, 2)  # the 3rd failure, then every one gets a stand-in
    for conv in convs:
        row = await core.row(conv)
        assert row.abbreviation.startswith(HEADER), conv
        assert row.abbreviated_turn == row.turn_count == 2
        assert row.needs_abbreviation  # still owed to the model
        assert vectors.indexed[conv] == row.abbreviation  # semantic search finds it
        [event] = core.events(conv, "abbreviation")
        assert event["needsAbbreviation"] is True  # kept by a reindex too
    calls = model.count("abbreviation")
    await _sweeps(clock, lifecycle, 4)  # still down: one call a sweep, nothing rewritten
    assert model.count("abbreviation") == calls + 4
    assert all(len(core.events(c, "abbreviation")) == 1 for c in convs)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= model.count("abbreviation") + 1  # one a sweep, not one a conv

    model.abbreviation = "Notes by the model once it is back."
    await _sweeps(clock, lifecycle, 1)
    for conv in convs:
        row = await core.row(conv)
        assert row.abbreviation == "Notes by the model once it is back."
        assert not row.needs_abbreviation
        assert vectors.indexed[conv] == row.abbreviation


async def test_a_stand_in_is_still_owed_to_the_model_after_a_reindex(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.abbreviation = unavailable()
    lifecycle = await make_lifecycle(model)
    conv = await _chatted(core)
    await _sweeps(clock, lifecycle, 5)
    assert (await core.row(conv)).abbreviation.startswith(HEADER)
    await lifecycle.stop(timeout=1.0)
    await core.close()
    delete_index(core.config.index_path)  # my-agent reindex
    rebuilt = await Core.open(core.config)
    try:
        await rebuilt.db.run(
            lambda c: recover(c, rebuilt.manager.store, core.config.external_dir, core.config)
        )
        assert (await rebuilt.row(conv)).needs_abbreviation
        model.abbreviation = "Notes by the model after the reindex."
        again = await make_lifecycle(model, on=rebuilt)  # the start's recovery queues it
        await again.settle()
        row = await rebuilt.row(conv)
        assert row.abbreviation == "Notes by the model after the reindex."
        assert not row.needs_abbreviation
    finally:
        await rebuilt.close()


async def test_a_refused_conversations_offline_notes_are_not_asked_again(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Offline notes the model refused to replace are final: only stand-ins are owed.
    model.abbreviation = ""
    lifecycle = await make_lifecycle(model)
    conv = await _chatted(core)
    await _sweeps(clock, lifecycle, 2)
    assert (await core.row(conv)).abbreviation.startswith(HEADER)
    await _sweeps(clock, lifecycle, 3)
    assert model.count("abbreviation") == 1


async def test_a_backlog_is_scheduled_without_loading_whole_records(core: Core) -> None:
    # Regression: the start and every sweep loaded each conversation owing notes whole
    # (notes, topics, metadata): 20,000 after an import or a week-long outage took some
    # 60 MB and 0.4 s at every start and sweep, to read three columns.
    notes = "Earlier notes of a long conversation. " * 100  # ~3.8 KB
    stamps = [f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z" for i in range(2000)]
    rows = [(f"conv-{i:05d}", "web", t, t, 9, notes, 8) for i, t in enumerate(stamps)]
    await core.db.run(
        lambda c: c.executemany(
            "INSERT INTO conversations (id, channel, created, updated, turn_count,"
            " abbreviation, abbreviated_turn) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    )
    tracemalloc.start()
    try:
        owed = await pending_abbreviations(core.manager)
        named = await unnamed(core.manager, 5, 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(owed) == len(named) == 2000
    assert owed[0].id == "conv-00000" and owed[0].updated == "2026-01-01T00:00:00Z"
    assert peak < 2_000_000, peak  # whole records: 19 MB


async def test_the_models_notes_are_kept_through_an_outage(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    lifecycle = await make_lifecycle(model)
    noted = await _chatted(core)
    await _sweeps(clock, lifecycle, 2)
    assert (await core.row(noted)).abbreviation == model.abbreviation
    model.abbreviation = unavailable()
    await core.chat(noted, 1, topic="the new disks")
    fresh = await _chatted(core)
    await _sweeps(clock, lifecycle, 6)
    row = await core.row(noted)
    # Behind, still the model's (offline notes would replace them until it answers)
    assert row.abbreviation.startswith("User and Assistant discussed")
    assert row.needs_abbreviation and row.abbreviated_turn == 2 < row.turn_count
    assert (await core.row(fresh)).abbreviation.startswith(HEADER)
    assert len(core.events(noted, "abbreviation")) == 1


async def test_a_sweep_while_the_model_is_down_rewrites_no_flag(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression: every sweep (and start) while the model was down set
    # needs_abbreviation = 1 again on each conversation owed notes: 15,000 writes a sweep.
    model.abbreviation = unavailable()
    lifecycle = await make_lifecycle(model)
    convs = [await _chatted(core) for _ in range(6)]
    await _sweeps(clock, lifecycle, 2)  # idle: the first fails, the rest are flagged
    assert [(await core.row(c)).needs_abbreviation for c in convs] == [True] * 6

    async def written() -> int:
        return await core.db.run(lambda c: c.total_changes)

    before = await written()
    await _sweeps(clock, lifecycle, 1)  # the model asked once more, failing again
    assert model.count("abbreviation") == 2
    assert await written() == before  # every flag was set already


async def test_a_rate_limit_asking_for_a_day_defers_the_notes_a_quarter_hour_with_stand_ins(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression (session 40): one 429 with retry-after 86400 on a notes call stopped
    # every note for a day (uncapped, where a waiting reply caps it at 15 minutes), and
    # the stand-ins never came: the deferral counted as one failure however long.
    model.abbreviation = BrainUnavailable("429 rate limited", retry_after=86400)
    lifecycle = await make_lifecycle(model)
    convs = [await _chatted(core) for _ in range(3)]
    await _sweeps(clock, lifecycle, 2)  # idle at 600 s: the one call, refused
    assert model.count("abbreviation") == 1
    await _sweeps(clock, lifecycle, 1)  # 15 minutes not asked: three sweeps' failures
    for conv in convs:
        row = await core.row(conv)
        assert row.abbreviation.startswith(HEADER), conv  # search keeps finding them
        assert row.needs_abbreviation  # still owed to the model
    assert model.count("abbreviation") == 1
    model.abbreviation = "Notes by the model after the rate limit."
    await _sweeps(clock, lifecycle, 2)  # past RETRY_AFTER_CAP, not a day: asked again
    for conv in convs:
        row = await core.row(conv)
        assert row.abbreviation == "Notes by the model after the rate limit.", conv
        assert not row.needs_abbreviation
