"""The groups' budgets through Telegram: the members of all allowed groups together are
answered at most ``trust.group_replies_per_hour_total`` times an hour, the owner hears of
it once in their private chat, and a restart changes neither."""

from __future__ import annotations

from pathlib import Path

from bot.bench.fakes.telegram_api import FakeTelegramServer

from .conftest import OWNER_ID, STRANGER_ID
from .stack import ScriptedBrain, start_stack

FAMILY, CLUB = -100500, -100600
GROUPS = [{"id": str(g), "respond": "always"} for g in (FAMILY, CLUB)]
TRUST = {"group_replies_per_hour": 5, "group_replies_per_hour_total": 2}


def _notices(server: FakeTelegramServer) -> list[str]:
    return [m["text"] for m in server.sent_to(OWNER_ID) if "group_replies" in m["text"]]


async def test_all_groups_together_are_answered_within_the_total_across_a_restart(
    tmp_path: Path, tg_server: FakeTelegramServer
) -> None:
    brain = ScriptedBrain()
    stack = await start_stack(
        tmp_path, tg_server, brain=brain, telegram={"groups": GROUPS}, trust=TRUST
    )
    try:
        for n, group in enumerate((FAMILY, CLUB)):
            tg_server.inject_message(group, f"member question {n}", from_id=STRANGER_ID)
            await tg_server.wait_sent(group, 1)
        tg_server.inject_message(FAMILY, "past the total", from_id=STRANGER_ID)
        await stack.wait(lambda: _notices(tg_server))
        tg_server.inject_message(CLUB, "mine", from_id=OWNER_ID, username="olga")
        await tg_server.wait_sent(CLUB, 2)
        assert [r.text for r in brain.requests][-1] == "mine"
        (notice,) = _notices(tg_server)
        assert "group_replies_per_hour_total" in notice and "2 answers" in notice
    finally:
        await stack.stop()
    stack = await start_stack(
        tmp_path, tg_server, brain=brain, telegram={"groups": GROUPS}, trust=TRUST
    )
    try:
        tg_server.inject_message(CLUB, "after the restart", from_id=STRANGER_ID)
        tg_server.inject_message(CLUB, "me again", from_id=OWNER_ID, username="olga")
        await tg_server.wait_sent(CLUB, 3)
        assert [r.text for r in brain.requests][3:] == ["me again"]  # nothing owed answered
        assert len(_notices(tg_server)) == 1  # told once an hour, across the restart
        assert [m["text"] for m in tg_server.sent_to(FAMILY)] == ["echo: member question 0"]
    finally:
        await stack.stop()
