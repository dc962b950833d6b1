"""Notes and titles written offline (no key) are owed to the model once it is
configured: the sweep hands them to it a few at a time, the recently active only."""

from __future__ import annotations

from datetime import timedelta

from bot.extractive import HEADER
from bot.lifecycle import ManualClock
from bot.lifecycle.recovery import (
    OFFLINE_REWRITE_DAYS,
    OFFLINE_REWRITES_PER_SWEEP,
    RETITLE_ATTEMPTS,
)

from .conftest import Core, MakeLifecycle, ScriptedModel


async def _noted_offline(core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle,
                         count: int, old: int = 0) -> list[str]:  # fmt: skip
    """``count`` conversations of 6 turns, noted and named with no model, then ``old``
    ones last active more than OFFLINE_REWRITE_DAYS ago."""
    offline = await make_lifecycle()  # the offline brain
    convs = []
    long_ago = clock.now() - timedelta(days=OFFLINE_REWRITE_DAYS + 1)
    for n in range(count + old):
        rec = await core.manager.create("web")
        await core.chat(rec.id, 6, at=long_ago if n >= count else None)
        convs.append(rec.id)
    await offline.settle()
    clock.advance(core.config.conversations.idle_timeout_seconds + 1)
    await offline.run_due()
    for conv in convs:
        row = await core.row(conv)
        assert row.abbreviation.startswith(HEADER) and not row.needs_abbreviation
        assert row.title and row.title != "NAS Backup Plan"  # a keyword title
    await offline.stop(timeout=1.0)
    return convs


async def test_a_key_set_later_brings_the_model_to_notes_written_offline(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression (session 40): notes written with no key are stored without the flag an
    # outage's stand-ins keep, so once a key was set the model never rewrote them (nor
    # the keyword titles): only a conversation that got a new message was re-noted.
    (conv,) = await _noted_offline(core, clock, make_lifecycle, 1)
    lifecycle = await make_lifecycle(model)
    await lifecycle.settle()
    clock.advance(core.config.conversations.abbreviation_sweep_seconds + 1)
    await lifecycle.run_due()
    row = await core.row(conv)
    assert row.abbreviation == model.abbreviation and not row.needs_abbreviation
    assert row.title == "NAS Backup Plan"
    # once written, the next sweeps do not ask again
    calls = len(model.calls)
    clock.advance(core.config.conversations.abbreviation_sweep_seconds + 1)
    await lifecycle.run_due()
    assert len(model.calls) == calls


async def test_notes_written_offline_are_rewritten_a_few_a_sweep_recent_ones_only(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    count = OFFLINE_REWRITES_PER_SWEEP + 2
    *convs, old = await _noted_offline(core, clock, make_lifecycle, count, old=1)
    assert (await core.row(old)).updated < (clock.now() - timedelta(days=1)).isoformat()
    lifecycle = await make_lifecycle(model)
    sweep = core.config.conversations.abbreviation_sweep_seconds + 1
    clock.advance(sweep)
    await lifecycle.run_due()
    assert model.count("abbreviation") == OFFLINE_REWRITES_PER_SWEEP  # not all at once
    for _ in range(3):
        clock.advance(sweep)
        await lifecycle.run_due()
    assert model.count("abbreviation") == count
    rows = [await core.row(c) for c in convs]
    assert all(r.abbreviation == model.abbreviation for r in rows)
    # idle longer than OFFLINE_REWRITE_DAYS: kept as they are (its next message re-notes)
    assert (await core.row(old)).abbreviation.startswith(HEADER)


async def test_only_offline_notes_the_model_declined_are_remembered(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression (session 41): every conversation the model was asked for was remembered
    # for the life of the daemon (_offline_asked), and each sweep sent them all to
    # SQLite; only offline notes it declined to replace need to be (not asked again).
    declined, written = await _noted_offline(core, clock, make_lifecycle, 2)
    model.abbreviation = lambda _system, prompt: "" if "topic one" in prompt else "Notes."
    await core.chat(declined, 1, topic="topic one")  # owed notes again, from the model
    await core.chat(written, 1, topic="topic two")
    lifecycle = await make_lifecycle(model)
    idle = core.config.conversations.idle_timeout_seconds + 1
    clock.advance(idle)
    await lifecycle.run_due()
    await lifecycle.settle()
    assert (await core.row(declined)).abbreviation.startswith(HEADER)  # a refusal
    assert (await core.row(written)).abbreviation == "Notes."
    assert lifecycle._offline_asked == {declined}
    calls = model.count("abbreviation")
    for _ in range(2):  # the refused one's offline notes are final: not asked again
        clock.advance(core.config.conversations.abbreviation_sweep_seconds + 1)
        await lifecycle.run_due()
    assert model.count("abbreviation") == calls
    # the model writes them after its next message: forgotten
    model.abbreviation = "Notes at last."
    await core.chat(declined, 1)
    clock.advance(idle)
    await lifecycle.run_due()
    await lifecycle.settle()
    assert (await core.row(declined)).abbreviation == "Notes at last."
    assert lifecycle._offline_asked == set()


async def test_offline_notes_the_model_keeps_failing_on_are_asked_a_bounded_number_of_times(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    # Regression (session 42): a conversation handed to the model for its offline notes
    # and title (_retitle) whose passes kept failing stayed flagged and in _retitle, and
    # every sweep asked the model again, for the life of the daemon.
    (conv,) = await _noted_offline(core, clock, make_lifecycle, 1)
    title = (await core.row(conv)).title
    model.abbreviation = RuntimeError("400: this conversation's prompt is refused")
    lifecycle = await make_lifecycle(model)
    for _ in range(RETITLE_ATTEMPTS + 5):
        clock.advance(core.config.conversations.abbreviation_sweep_seconds + 1)
        await lifecycle.run_due()
        await lifecycle.settle()
    assert model.count("abbreviation") == RETITLE_ATTEMPTS
    assert lifecycle._retitle == set() and not lifecycle._retitle_failures
    row = await core.row(conv)
    # as before it was handed over: its offline notes and keyword title stand, unflagged
    assert row.abbreviation.startswith(HEADER) and row.title == title
    assert not row.needs_abbreviation
    query = "SELECT abbreviation_failed FROM conversations WHERE id = ?"
    assert await core.db.fetchall(query, (conv,)) == [(0,)]  # not "failed, to retry"
    # its next message brings the model to it again
    model.abbreviation = "Notes at last."
    await core.chat(conv, 1)
    clock.advance(core.config.conversations.idle_timeout_seconds + 1)
    await lifecycle.run_due()
    await lifecycle.settle()
    assert (await core.row(conv)).abbreviation == "Notes at last."
