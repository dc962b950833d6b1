"""A transcript deleted while the daemon runs is recreated by the next write with its
meta line (channel, identity, model): before, it came back without one, and the next
index rebuild registered it as a web conversation, its sender's messages going to a new
conversation."""

from __future__ import annotations

import json
from pathlib import Path

from bot.recovery import delete_index
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


async def test_a_deleted_transcript_is_recreated_with_its_meta_line(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config)
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("the boiler again", sender=OWNER))
        await settle(services)
        (rec,) = await services.conversations.list()
        path = services.store.path(rec.id)
        first = json.loads(path.read_bytes().splitlines()[0])
        path.unlink()  # by hand, while the daemon runs
        await services.router.deliver(inbound("and the roof?", sender=OWNER))
        await settle(services)
        lines = [json.loads(raw) for raw in path.read_bytes().splitlines()]
        assert lines[0] == first  # the same meta line: channel, identity, pin, model
        assert next(line["content"] for line in lines[1:] if line["type"] == "turn") == (
            "and the roof?"
        )
    finally:
        await shutdown_services(services)

    delete_index(config.index_path)  # rebuilt from the transcripts (`my-agent reindex`)
    services = await open_services(config)
    try:
        again = await services.conversations.get(rec.id)
        assert again is not None
        assert (again.channel, again.identity_key, again.pinned) == (
            "telegram",
            rec.identity_key,
            True,
        )
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("any news?", sender=OWNER))
        await settle(services)
        assert [c.id for c in await services.conversations.list()] == [rec.id]
    finally:
        await shutdown_services(services)
