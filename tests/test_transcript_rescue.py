"""A transcript deleted while the daemon was stopped: what the index held of it is saved
as a transcript of its own before its rows go, and the owner is told the file's name.
Before session 27 its rows were dropped silently, its turns lost with them."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.daemon import start_serving
from bot.services import open_services
from bot.transcript import parse_lines
from bot.transcript_rescue import removed_copy_path
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import inbound

OWNER = "424242"


async def test_a_deleted_transcript_is_saved_from_the_index_and_can_be_put_back(
    tmp_path: Path,
) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config)
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        await services.router.deliver(inbound("the quince jam recipe", sender=OWNER))
        await settle(services)
        (conv_id,) = [r.id for r in await services.index.list(limit=10)]
        rec = await services.conversations.get(conv_id)
        assert rec is not None and rec.turn_count == 1
        before = [
            (line["role"], line["content"], line["turnNumber"])
            for line in services.store.read_lines(conv_id)
            if line.get("type") == "turn"
        ]
    finally:
        await shutdown_services(services)
    transcript = config.conversations_dir / f"{conv_id}.jsonl"
    transcript.unlink()  # deleted while stopped

    services = await open_services(config)
    copy = removed_copy_path(config.conversations_dir, conv_id)
    try:
        assert services.recovery is not None and services.recovery.removed == 1
        assert await services.index.get(conv_id) is None  # out of search and history
        lines = parse_lines(copy.read_bytes(), copy.name)
        assert lines[0]["type"] == "meta" and lines[0]["id"] == conv_id
        assert lines[0]["channelMeta"] == rec.channel_meta
        saved = [(x["role"], x["content"], x["turnNumber"]) for x in lines[1:]]
        assert saved == before
        assert copy.stat().st_mode & 0o777 == 0o600
        assert services.recovery.saved == {transcript.name: (copy, len(before))}
        telegram = RecordingChannel("telegram")
        services.channels["telegram"] = telegram
        await start_serving(services, [telegram])
        sent = await telegram.wait_for(lambda sent: any(str(copy) in m.text for m in sent))
        alert = next(m for m in sent if str(copy) in m.text)
        assert alert.chat_id == OWNER and alert.text.startswith("Transcripts missing at start")
        assert f"{conv_id}.jsonl was missing" in alert.text
    finally:
        await shutdown_services(services)

    shutil.move(copy, transcript)  # the owner puts it back
    services = await open_services(config)
    try:
        assert services.recovery is not None and services.recovery.registered == 1
        back = await services.conversations.get(conv_id)
        assert back is not None and back.channel_meta == rec.channel_meta
        assert back.turn_count == rec.turn_count
        assert "quince" in str(await services.search.search("quince jam"))
    finally:
        await shutdown_services(services)


async def test_a_copy_that_cannot_be_written_keeps_the_rows(tmp_path: Path) -> None:
    config = telegram_config(tmp_path)
    services = await open_services(config)
    try:
        rec = await services.conversations.create("web")
        await services.conversations.append_turn(rec.id, "user", "printer ink")
    finally:
        await shutdown_services(services)
    (config.conversations_dir / f"{rec.id}.jsonl").unlink()
    (config.conversations_dir / "removed").write_text("not a directory", encoding="utf-8")

    services = await open_services(config)
    try:
        assert services.recovery is not None and services.recovery.removed == 0
        assert await services.index.get(rec.id) is not None  # kept until it can be saved
    finally:
        await shutdown_services(services)
