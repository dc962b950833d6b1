"""The notes a previous run left owed come before the vector rebuild of a model change:
:meth:`Lifecycle.owed_notes_written` is what the rebuild waits for (bot.daemon_vectors)."""

from __future__ import annotations

import asyncio

from bot.lifecycle import ManualClock

from .conftest import Core, MakeLifecycle, ScriptedModel, unavailable


async def test_owed_notes_written_waits_for_the_notes_recovery_queued(
    core: Core, clock: ManualClock, make_lifecycle: MakeLifecycle, model: ScriptedModel
) -> None:
    model.abbreviation = unavailable()
    first = await make_lifecycle(model)
    rec = await core.manager.create("web")
    await core.chat(rec.id, 3)
    clock.advance(600)
    await first.run_due()
    assert (await core.row(rec.id)).needs_abbreviation  # owed to the next run
    await first.stop(timeout=1)

    model.abbreviation = "Notes the restart owed."
    model.gate = asyncio.Event()  # the model answers when the test says so
    second = await make_lifecycle(model)
    written = asyncio.ensure_future(second.owed_notes_written())
    try:
        # the pass has asked the model and waits for it: the rebuild must wait too
        for _ in range(100_000):  # turns of the loop, not time
            if model.count("abbreviation") > 1:
                break
            await asyncio.sleep(0)
        assert model.count("abbreviation") == 2 and not written.done()
        model.gate.set()
        await asyncio.wait_for(written, 30)
    finally:
        written.cancel()
    row = await core.row(rec.id)
    assert row.abbreviation == "Notes the restart owed." and not row.needs_abbreviation
