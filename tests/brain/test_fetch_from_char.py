"""Every character of a long message can be read: fetch_context's ``fromChar``.

Regression (session 40): a message over 40,000 characters (a pasted log) was cut in the
working context to its first ~32,000 and last ~16,000 characters, and fetch_context of
the turn alone gave its first 40,000 and "[...truncated: 56865 more characters]", with
no way to read on (its input had conversationId and turnRange only): the account
number at character 48,000 was out of the model's reach for good, though the docs said
a cut message "says how many characters are left and how to read them".
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from bot.bench.fakes.anthropic_api import FakeAnthropicAPI
from bot.brain.group_lines import owner_marked
from bot.brain.recall_fetch import FETCH_MAX_CHARS_ALONE, _turn_view, fetch_turns
from bot.brain.tools import RecallTools, execute, tool_map
from bot.brain.working_contexts import WorkingContexts
from bot.config import AppConfig
from bot.transcript import turn_line
from tests.brain.conftest import (
    ManualClock,
    make_brain,
    make_config,
    owner_request,
    seed_conversation,
    uncached,
)

SECRET = "ERROR the account number is 99-1234-5678 ORANGE\n"
READ_ON = re.compile(r"read on with fromChar (\d+) \(turnRange from (\d+) to \2\)\]$")


def paste() -> str:
    """~97,000 characters of log with the one useful line in the middle."""
    body = ("log line ok " * 10 + "\n") * 800
    mid = len(body) // 2
    return "Here is the log:\n" + body[:mid] + SECRET + body[mid:]


def unwrap(content: str) -> dict[str, Any]:
    body = content.split("\n", 2)[2].rsplit("\n</recalled_data>", 1)[0]
    return dict(json.loads(body))


async def read_whole(tools: dict[str, Any], conv: str, turn: int, start: int = 0) -> str:
    """The stored message of ``turn``, read by following each cut's note from ``start``."""
    text = ""
    at = start
    for _ in range(10):
        args = {"conversationId": conv, "turnRange": {"from": turn, "to": turn}}
        if at:
            args["fromChar"] = at
        content, err = await execute(tools, "fetch_context", args)
        assert not err, content
        [message] = unwrap(content)["turns"]
        piece = str(message["content"])
        if at:
            mark = re.match(r"\[from character (\d+) of \d+\] ", piece)
            assert mark is not None and int(mark.group(1)) == at
            piece = piece[mark.end() :]
        note = READ_ON.search(piece)
        if note is None:
            return text + piece
        assert int(note.group(2)) == turn
        text += piece[: piece.rindex(" [...truncated: ")]
        at = int(note.group(1))
    raise AssertionError("never came to the end")


async def test_the_middle_of_a_huge_paste_is_read_from_where_the_context_cut_it(
    tmp_path, fake_api: FakeAnthropicAPI, core: SimpleNamespace
) -> None:
    config = make_config(tmp_path, fake_api)  # the default budget: 24,000 tokens
    text = paste()
    conv = await seed_conversation(core, [("user", text)])
    brain = make_brain(config, core, ManualClock())
    try:
        fake_api.push_text("answered")
        await brain.reply(owner_request(text, conv))
        sent = uncached(fake_api.requests[0].body)["messages"][0]["content"]
    finally:
        await brain.client.close()
    assert "99-1234-5678" not in sent  # cut out of the context ...
    note = re.search(
        r"\[\.\.\. (\d+) more characters not shown here: longer than the working context "
        rf"allows; read them with fetch_context \(conversationId {conv}, turnRange from 1 "
        r"to 1, fromChar (\d+)\) \.\.\.\]",
        sent,
    )
    assert note is not None, sent[30_000:33_000]
    at = int(note.group(2))
    assert sent.startswith(text[:at]) and sent.index("\n[... ") == at  # where the cut is

    # ... and read from there, as the note says; every character of it, to the end
    tools = tool_map(RecallTools(config, core).tools())
    rest = await read_whole(tools, conv, 1, at)
    assert SECRET in rest and text[:at] + rest == text
    assert await read_whole(tools, conv, 1) == text  # from the start too (the first page)


async def test_from_char_is_checked_like_the_other_inputs(
    config: AppConfig, core: SimpleNamespace
) -> None:
    conv = await seed_conversation(core, [("user", "short"), ("assistant", "ok " * 20)])
    tools = tool_map(RecallTools(config, core).tools())

    async def fetch(**args: Any) -> tuple[str, bool]:
        return await execute(tools, "fetch_context", {"conversationId": conv, **args})

    one = {"from": 1, "to": 1}
    for bad in (-1, "ten", 2.5, True):
        content, err = await fetch(turnRange=one, fromChar=bad)
        assert err and "fromChar must be" in content, bad
    content, err = await fetch(turnRange={"from": 1, "to": 2}, fromChar=3)
    assert err and "fromChar reads one turn" in content
    content, err = await fetch(turnRange=one, fromChar=40)
    user, assistant = unwrap(content)["turns"]
    assert not err
    assert user["content"] == "[nothing from character 40 on: this message has 5 characters]"
    assert assistant["content"] == "[from character 40 of 60] " + ("ok " * 20)[40:]


async def test_a_turn_fetched_alone_over_the_budget_left_is_cut_to_it_not_refused(
    config: AppConfig, core: SimpleNamespace
) -> None:
    text = paste()
    conv = await seed_conversation(core, [("user", text)])
    args = {"conversationId": conv, "turnRange": {"from": 1, "to": 1}, "fromChar": 1000}
    content = await fetch_turns(core, "Europe/Berlin", args, max_tokens=3000)
    [message] = unwrap(content)["turns"]
    note = READ_ON.search(message["content"])
    assert note is not None and 1000 < int(note.group(1)) < 1000 + FETCH_MAX_CHARS_ALONE // 4
    assert message["content"].startswith("[from character 1000 of ")
    assert text[1000 : int(note.group(1))] in message["content"]


def test_the_cut_note_counts_in_the_stored_message_not_its_label() -> None:
    # A group's owner line is shown after its mark: fromChar is where the cut is in
    # what was stored (what fetch_context reads), not in the labelled text.
    text = "".join(f"line {n:05d}\n" for n in range(4000))
    lines = [turn_line("user", text, 3, fromOwner=True)]
    contexts = WorkingContexts(max_turns=20, max_tokens=8000, keep_tokens=1000)
    contexts.max_turn_tokens = 3000
    [turn] = contexts.assemble("conv-g", lines).turns
    mark = owner_marked("")
    assert turn.content.startswith(mark)
    at = int(re.search(r"fromChar (\d+)\)", turn.content).group(1))  # type: ignore[union-attr]
    head = turn.content[len(mark) : turn.content.index("\n[... ")]
    assert text[:at] == head


def test_a_read_from_the_middle_of_a_character_starts_at_its_beginning() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    content = "w" * 99 + family + "tail"
    view = _turn_view({"content": content, "turnNumber": 1}, ZoneInfo("UTC"), 100, True, 101)
    assert view["content"] == f"[from character 99 of {len(content)}] {family}tail"
