"""``my-agent status`` reports the daemon's last check of every page of the index and
reads them itself only with ``--pages`` (bot.health_pages). Before session 28 every
``status`` without ``--quick`` read the whole index: 41 s for the 640 MB ``bench
search`` store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot import health_store, healthcheck
from bot.db import Database
from bot.health_pages import NOT_CHECKED
from bot.health_text import format_text
from bot.index_rescue import PAGES_DAMAGED, PAGES_OK, check_pages
from bot.schema import INDEX_MIGRATIONS
from tests.support import garble_page
from tests.test_healthcheck import _config, _populate


async def _daemon_check(path: Path) -> str:
    """The daemon's daily page check (bot.index_page_checks) of the index at ``path``."""
    db = await Database.open(path, INDEX_MIGRATIONS)
    try:
        return await check_pages(db)
    finally:
        await db.close()


async def test_status_reports_the_daemons_last_check_and_reads_the_pages_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    await _populate(config)
    reads: list[object] = []

    def page_check(conn: object) -> str:
        reads.append(conn)
        return PAGES_OK

    monkeypatch.setattr(health_store, "page_check", page_check)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert reads == []  # no page read by a plain status
    assert report["index"]["pages"] == NOT_CHECKED and report["index"]["pages_checked"] is None
    assert report["index"]["ok"], report["index"]["problems"]
    assert "pages: " in format_text(report) and "--pages checks now" in format_text(report)

    assert await _daemon_check(config.index_path) == PAGES_OK
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert reads == [] and report["index"]["pages"] == PAGES_OK
    assert str(report["index"]["pages_checked"]).startswith("20")
    assert "every page checked " in format_text(report)

    report = await asyncio.to_thread(healthcheck.collect, config, pages=True)
    assert len(reads) == 1 and report["index"]["pages"] == PAGES_OK
    quick = await asyncio.to_thread(healthcheck.collect, config, deep=False)
    assert len(reads) == 1 and quick["index"]["pages"] == "skipped"


async def test_damage_the_daemons_check_found_is_a_problem_of_status(tmp_path: Path) -> None:
    config = _config(tmp_path)
    await _populate(config)
    garble_page(config.index_path, "sqlite_autoindex_conversations_1")
    assert (await _daemon_check(config.index_path)).startswith(PAGES_DAMAGED)
    report = await asyncio.to_thread(healthcheck.collect, config)
    assert report["exit_code"] == 1
    problem = next(p for p in report["problems"] if "damaged" in p)
    assert "found damaged by the daemon's page check at 20" in problem, problem
    assert "my-agent reindex" in problem
