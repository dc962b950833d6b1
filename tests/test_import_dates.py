"""A conversation whose turns are older than its creation (an import: history written
into the store with its turns' own times, as ``bench locomo`` builds its stores) is
dated by its turns: in the conversation list, in search's date filters, after a
reindex."""

from __future__ import annotations

from pathlib import Path

from bot.config.model import AppConfig
from bot.conversations import ConversationManager
from bot.db import Database
from bot.hooks import EventBus
from bot.index import ConversationIndex
from bot.recovery import delete_index, recover
from bot.search import Filters, SearchService
from bot.transcript import TranscriptStore
from tests.recall_helpers import open_index

MAY = "2023-05-08T13:56:00.000Z"
JUNE = "2023-06-02T09:10:00.000Z"


async def _manager(config: AppConfig, db: Database) -> ConversationManager:
    store = TranscriptStore(config.conversations_dir, fsync=False)
    return ConversationManager(config, store, ConversationIndex(db), EventBus())


async def _imported(manager: ConversationManager) -> str:
    rec = await manager.create("web", participants=["Caroline", "Melanie"])
    for stamp, words in ((MAY, "adoption agency interview"), (JUNE, "pottery class")):
        number = rec.turn_count + 1
        await manager.append_turn(rec.id, "user", f"The {words} went well", timestamp=stamp)
        await manager.append_turn(
            rec.id, "assistant", f"Glad the {words} went well", timestamp=stamp
        )
        rec = await manager.require(rec.id)
        assert rec.turn_count == number
    await manager.set_abbreviation(rec.id, "Caroline: adoption agency interview; pottery.")
    return rec.id


async def test_an_imported_conversation_is_dated_by_its_turns(tmp_path: Path) -> None:
    # Regression: created and updated stayed the import's time (a turn only moved
    # `updated` later), so the list sorted it as today's and a date filter ending
    # before the import dropped it (search reads the span created..updated).
    config = AppConfig(data_dir=tmp_path / "data")
    config.index_path.parent.mkdir(parents=True)
    db = await open_index(config.index_path)
    try:
        manager = await _manager(config, db)
        live = await manager.create("web")
        await manager.append_turn(live.id, "user", "the pottery kiln is ready")
        imported = await _imported(manager)

        for rec in (await manager.get(imported), await manager.index.get(imported)):
            assert rec is not None
            assert (rec.created, rec.updated) == (MAY, JUNE)
        listed = [rec.id for rec in await manager.list()]
        assert listed == [live.id, imported]  # the live one is the latest

        service = SearchService(config, db)
        page = await service.search("adoption agency", date_from="2023-05-01", date_to="2023-06-30")
        assert [r.conversation_id for r in page.results] == [imported]
        page = await service.search("pottery", date_to="2023-12-31")
        assert [r.conversation_id for r in page.results] == [imported]
        # Its notes, found by their vector, are filtered by the conversation's dates
        # (Filters.conversation_sql: the span created..updated), not a turn's.
        for dates, expected in (
            ({"date_to": "2023-12-31"}, {imported}),
            ({"date_from": "2023-05-01", "date_to": "2023-05-31"}, {imported}),
            ({"date_from": "2024-01-01"}, {live.id}),
            ({"date_to": "2023-04-30"}, set()),
        ):
            where, params = Filters(**dates).conversation_sql()
            rows = await db.fetchall(f"SELECT id FROM conversations WHERE {where}", params)
            assert {row[0] for row in rows} == expected, dates
        page = await service.search("pottery", date_from="2024-01-01")
        assert [r.conversation_id for r in page.results] == [live.id]
    finally:
        await db.close()

    # A rebuild from the transcripts dates it the same way.
    delete_index(config.index_path)  # my-agent reindex
    db = await open_index(config.index_path)
    try:
        store = TranscriptStore(config.conversations_dir, fsync=False)
        await db.run(lambda c: recover(c, store, config.external_dir, config))
        rec = await ConversationIndex(db).get(imported)
        assert rec is not None and (rec.created, rec.updated) == (MAY, JUNE)
    finally:
        await db.close()


async def test_a_live_conversation_keeps_its_creation_and_last_turn(tmp_path: Path) -> None:
    config = AppConfig(data_dir=tmp_path / "data")
    config.index_path.parent.mkdir(parents=True)
    db = await open_index(config.index_path)
    try:
        manager = await _manager(config, db)
        rec = await manager.create("web")
        created = rec.created
        await manager.append_turn(rec.id, "user", "hello")
        _, line = await manager.append_turn(rec.id, "assistant", "hi")
        row = await manager.index.get(rec.id)
        assert row is not None and row.created == created and row.updated == line["timestamp"]
    finally:
        await db.close()
