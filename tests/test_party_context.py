"""A known contact's message written long before it came is labelled so for the model,
as the owner's late turns are (bot/party_context.py). Before session 42 their file kept
no ``sentAt`` and the index neither: a message Telegram delivered 20 h late was answered
as if just said."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.db import apply_migrations, connect_sync
from bot.events import SENT_AT, iso, utcnow
from bot.parties import party_handle
from bot.party_rescue import party_index_lines
from bot.schema import INDEX_MIGRATIONS
from bot.services import open_services
from tests.conftest import (
    RecordingChannel,
    attach_channel,
    settle,
    shutdown_services,
    telegram_config,
)
from tests.support import ScriptedBrain, inbound

KIM = "7001"
PARTY = party_handle("telegram", KIM)
ASKED = "can you call me in ten minutes?"


def _file(services: Any) -> list[dict[str, Any]]:
    path = services.config.external_dir / f"{PARTY}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_known_contacts_late_message_is_labelled_with_when_it_was_written(
    tmp_path: Path,
) -> None:
    config = telegram_config(tmp_path, trust={"contacts": {"telegram": {KIM: "known"}}})
    brain = ScriptedBrain()
    services = await open_services(config, brain=brain)
    try:
        await attach_channel(services, RecordingChannel("telegram"))
        written = utcnow() - timedelta(hours=20)
        late = inbound(ASKED, sender=KIM, message_id="k0", metadata={SENT_AT: iso(written)})
        await services.router.deliver(late)
        await settle(services)
        # in UTC, as the restricted prompt's time (the owner's zone says where they live)
        label = (
            f"[Written {written:%A} {written.day} {written:%B %Y, %H:%M} (UTC); "
            "it reached you 20 h later.]"
        )
        assert brain.requests[-1].text == f"{label} {ASKED}"
        # kept in their file beside when it came, and so read again at the next answer
        (line,) = [x for x in _file(services) if x.get("direction") == "in"]
        assert line[SENT_AT] == iso(written) and line["timestamp"] > line[SENT_AT]
        on_time = inbound("hello?", sender=KIM, message_id="k1", metadata={SENT_AT: iso(utcnow())})
        await services.router.deliver(on_time)
        await settle(services)
        assert brain.requests[-1].text == "hello?"  # on time: as it is
        history = [(h.role, h.content) for h in brain.requests[-1].history]
        assert history == [("user", f"{label} {ASKED}"), ("assistant", f"re: {label} {ASKED}")]
        # a record rebuilt from the index keeps it too
        lines = await services.external.db.run(lambda conn: party_index_lines(conn, PARTY))
        assert [x.get(SENT_AT) for x in lines if x.get("direction") == "in"] == [
            iso(written),
            on_time.metadata[SENT_AT],
        ]
    finally:
        await shutdown_services(services)


def test_a_message_of_a_file_written_before_or_on_time_is_shown_as_it_is() -> None:
    from bot.party_context import history_turn, labelled

    came = "2026-11-29T12:00:00.000Z"
    old = {"direction": "in", "content": ASKED, "timestamp": came, "sentAt": None}
    assert history_turn(old).content == ASKED  # a line of a file written before
    for sent in ("2026-11-29T11:56:00.000Z", "2026-11-29T13:00:00.000Z", "not a date"):
        assert labelled(ASKED, sent, came) == ASKED  # on time, a clock ahead, unreadable
    assert labelled(ASKED, "2026-11-28T10:00:00.000Z", came) == (
        "[Written Saturday 28 November 2026, 10:00 (UTC); it reached you 26 h later.] " + ASKED
    )
    ours = {"direction": "out", "content": "Sure.", "timestamp": came, "sentAt": "2020"}
    assert history_turn(ours).content == "Sure."


def test_a_record_is_rebuilt_from_an_index_written_before_sent_at(tmp_path: Path) -> None:
    # `my-agent reindex` reads the index it replaces unmigrated (bot/recovery_reindex.py):
    # one of migration 15 has no sent_at, and its parties' rows must still be saved.
    conn = connect_sync(tmp_path / "conversations.db")
    try:
        apply_migrations(conn, INDEX_MIGRATIONS[:15])
        came = "2026-11-29T12:00:00.000Z"
        conn.execute(
            "INSERT INTO external_parties (id, channel, party_key, tier, created, updated)"
            " VALUES (?, 'telegram', ?, 'known', ?, ?)",
            (PARTY, KIM, came, came),
        )
        conn.execute(
            "INSERT INTO external_messages (party_id, direction, content, timestamp,"
            " message_ref) VALUES (?, 'in', ?, ?, 'k0')",
            (PARTY, ASKED, came),
        )
        lines = party_index_lines(conn, PARTY)
    finally:
        conn.close()
    (said,) = [x for x in lines if x["type"] == "message"]
    assert said["content"] == ASKED and SENT_AT not in said


def test_a_blank_late_message_keeps_its_placeholder_after_the_label() -> None:
    # Regression (session 42): the label alone stood for a blank late message, read as
    # its words (the API's placeholder for blank text was skipped: the text was not blank).
    from bot.brain.restricted_context import EMPTY_MESSAGE
    from bot.party_context import labelled

    late = labelled("  ", "2026-11-28T10:00:00.000Z", "2026-11-29T12:00:00.000Z")
    assert late.endswith(f"later.] {EMPTY_MESSAGE}")
    assert labelled("", "2026-11-29T11:59:00.000Z", "2026-11-29T12:00:00.000Z") == ""
