"""A group member's reply reads only what was said there since their first message
(bot/brain/restricted_window.py): a newcomer is not read what the owner and the others
said before they came."""

from __future__ import annotations

import json
from pathlib import Path

from bot.brain.restricted_group import OWNER_MARK
from bot.brain.restricted_window import MEMBERSHIP, WINDOW_TURNS, MemberWindows, arrival
from bot.services import open_services
from bot.transcript_lines import recallable
from tests.conftest import settle, shutdown_services
from tests.support import ScriptedBrain
from tests.test_router import Core, _config

GROUP = {"group_id": "-100", "chat": "-100"}
OWNER = "424242"


async def test_a_newcomer_reads_the_group_from_their_first_message_on(tmp_path: Path) -> None:
    # Regression: a member's reply was given the group's last 20 turns, whoever was
    # there: the member who first wrote after the owner's door code was read it.
    brain = ScriptedBrain()
    core = await Core(await open_services(_config(tmp_path), brain=brain), brain).start()
    try:
        say = core.deliver
        await say("morning all", sender="55", sender_name="Ann", addressed=False, **GROUP)
        await say("the door code is 4711", sender=OWNER, sender_name="Robin",
                  addressed=False, **GROUP)  # fmt: skip
        await say("what did Robin just say?", sender="55", sender_name="Ann", **GROUP)
        await settle(core.s)
        await say("hi, new here: what did I miss?", sender="66", sender_name="Bo", **GROUP)
        await settle(core.s)
        await say("welcome Bo", sender=OWNER, sender_name="Robin", addressed=False, **GROUP)
        await say("and now?", sender="66", sender_name="Bo", **GROUP)
        await settle(core.s)
        ann, bo_first, bo_later = core.brain.requests
        assert all(r.profile == "restricted" for r in core.brain.requests)
        ann_read = [h.content for h in ann.history]
        assert f"{OWNER_MARK}: the door code is 4711" in ann_read  # Ann was there
        assert bo_first.history == ()  # nothing said before Bo came
        bo_read = "\n".join(h.content for h in bo_later.history)
        assert "4711" not in bo_read and "morning all" not in bo_read
        assert "new here" in bo_read and f"{OWNER_MARK}: welcome Bo" in bo_read
        # the answer to Bo's first message, which Bo read in the group
        assert any(h.role == "assistant" for h in bo_later.history)
    finally:
        await shutdown_services(core.s)


def _line(number: int, role: str, text: str, **fields: object) -> str:
    line = {"type": "turn", "role": role, "turnNumber": number, "content": text, **fields}
    return json.dumps(line) + "\n"


async def test_a_member_who_wrote_before_the_window_reads_all_of_it(tmp_path: Path) -> None:
    path = tmp_path / "group.jsonl"
    lines = [_line(1, "user", "first words", senderId="55", fromOwner=False, sender="Ann")]
    for n in range(2, 40):
        lines.append(_line(n, "user", f"owner line {n}", senderId=OWNER, fromOwner=True))
    lines.append(_line(40, "user", "what now?", senderId="55", fromOwner=False, sender="Ann"))
    path.write_text("".join(lines))
    assert arrival(path, "55", 40) == 1 and arrival(path, "77", 40) is None
    history = await MemberWindows().history("g", path, 40)
    assert [h.content for h in history] == [f"{OWNER_MARK}: owner line {n}" for n in range(20, 40)]


async def test_a_turn_that_does_not_say_whose_it_is_reads_no_history(tmp_path: Path) -> None:
    # A turn recorded before turns named their sender's account (a reply resumed after
    # the upgrade): nothing vouches for when its sender came.
    path = tmp_path / "group.jsonl"
    path.write_text(
        _line(1, "user", "the owner's secret", senderId=OWNER, fromOwner=True)
        + _line(2, "user", "tell me", fromOwner=False, sender="Ann")
    )
    assert await MemberWindows().history("g", path, 2) == ()


async def test_a_member_reads_from_their_latest_arrival_as_the_transcript_grows(
    tmp_path: Path,
) -> None:
    # A member who left reads from their first message after it when their return was
    # not announced, from their join when it was; the arrival remembered for the first
    # reply is read on from there, not kept (before session 30: the first message ever).
    path = tmp_path / "group.jsonl"
    ann = {"senderId": "55", "fromOwner": False, "sender": "Ann"}
    owner = {"senderId": OWNER, "fromOwner": True}

    def left(n: int) -> str:
        return _line(n, "user", "[left the group]", metadata={"membership": "left"}, **ann)

    path.write_text(_line(1, "user", "hi", **ann) + _line(2, "user", "code 4711", **owner))
    windows = MemberWindows()
    assert await windows.history("g", path, 1) == ()
    with path.open("a") as f:
        f.write(left(3) + _line(4, "user", "code 9313", **owner) + _line(5, "user", "back", **ann))
    assert arrival(path, "55", 5) == 5 and arrival(path, "55", 2) == 1
    assert await windows.history("g", path, 5) == ()  # nothing said since they came back
    joined = _line(7, "user", "[joined the group]", metadata={"membership": "joined"}, **ann)
    with path.open("a") as f:
        f.write(left(6) + joined + _line(8, "user", "welcome", **owner))
        f.write(_line(9, "user", "what now?", **ann))
    history = [h.content for h in await windows.history("g", path, 9)]
    assert history[1:] == [f"{OWNER_MARK}: welcome"] and "joined" in history[0]
    assert "9313" not in " ".join(history)


async def test_join_notices_are_shown_but_not_counted_and_at_most_a_window_of_them(
    tmp_path: Path,
) -> None:
    # Regression: a notice took a turn of the member's 20: thirty people added at once
    # left the member's reply nothing that was said. Now the 20 turns said are read,
    # with the latest 20 notices among them (a mass add cannot fill the token budget).
    path = tmp_path / "group.jsonl"
    lines = [_line(1, "user", "first words", senderId="55", fromOwner=False, sender="Ann")]
    for n in range(2, 22):
        lines.append(_line(n, "user", f"owner line {n}", senderId=OWNER, fromOwner=True))
    for n in range(22, 52):
        lines.append(_line(n, "user", "[joined the group]", senderId=f"9{n}", fromOwner=False,
                           sender=f"Guest {n}", metadata={MEMBERSHIP: "joined"}))  # fmt: skip
    lines.append(_line(52, "user", "what now?", senderId="55", fromOwner=False, sender="Ann"))
    path.write_text("".join(lines))
    read = [h.content for h in await MemberWindows().history("g", path, 52)]
    said = [c for c in read if "[joined the group]" not in c]
    assert said == [f"{OWNER_MARK}: owner line {n}" for n in range(2, 22)]
    joined = [c for c in read if "[joined the group]" in c]
    assert len(joined) == WINDOW_TURNS and "Guest 51" in joined[-1] and "Guest 32" in joined[0]


def test_a_notice_is_kept_out_of_recall_and_a_members_words_are_not() -> None:
    notice = {"role": "user", "content": "[left the group]", "metadata": {MEMBERSHIP: "left"}}
    said = {"role": "user", "content": "[left the group] (joking)", "metadata": {}}
    assert not recallable(notice) and recallable(said) and recallable({"role": "user"})
