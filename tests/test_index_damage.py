"""conversations.db damaged while the daemon runs ("database disk image is malformed"
from a read): recognised once, logged, shown as a status problem, the owner told, and the
next start sets the index aside and rebuilds it from the transcripts. Before, it was
noticed only at a restart (if the open touched the damaged page), the owner never told."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bot.db import select_driver
from bot.healthcheck import live_status
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import inbound

OWNER = "424242"


def damaged_marker(index: Path) -> Path:
    return index.with_name(f"{index.name}.damaged")


def _malformed(conn: Any) -> None:
    """A read that meets a damaged page (SQLITE_CORRUPT), as the search's would."""
    exc = select_driver().module.DatabaseError("database disk image is malformed")
    exc.sqlite_errorcode = 11  # type: ignore[attr-defined]
    raise exc


async def test_index_damage_found_while_running_is_reported_once_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config, exclusive=True)
    try:
        telegram = await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("the boiler again", sender=OWNER))
        await settle(services)
        sent_before = len(telegram.sent)
        with caplog.at_level(logging.ERROR, logger="my_agent.db"):
            for _ in range(3):
                with pytest.raises(Exception, match="malformed"):
                    await services.index_db.run(_malformed, write=False)
        damaged = [r for r in caplog.records if "is damaged" in r.getMessage()]
        assert len(damaged) == 1  # recognised once, not at every read
        status = await live_status(services)
        assert "conversations.db is damaged (database disk image is malformed)" in status
        assert "restart my-agent to rebuild it" in status
        alerts = await telegram.wait_for(lambda sent: len(sent) > sent_before)
        assert [m.text for m in alerts[sent_before:] if "damaged" in m.text] == [
            "Index problem: conversations.db is damaged (database disk image is malformed): "
            "searches, histories and index writes that reach the damaged part may fail, the "
            "rest works; the transcripts are not affected; restart my-agent to rebuild it "
            "from the transcripts."
        ]
        assert damaged_marker(config.index_path).exists()
    finally:
        await shutdown_services(services)

    services = await open_services(config, exclusive=True)  # the restart rebuilds it
    try:
        assert not damaged_marker(config.index_path).exists()
        assert list(config.index_path.parent.glob("conversations.db.corrupt-*"))
        assert services.recovery is not None and services.recovery.registered == 1
        assert services.index_db.damage is None
    finally:
        await shutdown_services(services)
