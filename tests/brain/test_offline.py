"""The offline brain's labelled recall replies (over the real index and search)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from bot.brain import offline
from bot.brain.base import BrainRequest
from bot.brain.offline import KEYWORD_ONLY, OFFLINE_LABEL, OfflineBrain
from bot.search.fusion import snippet
from bot.search.query import MAX_QUERY_CHARS, query_terms
from tests.recall_helpers import Relabelled


async def test_recalled_conversations_are_dated_by_the_owners_calendar(
    core: SimpleNamespace,
) -> None:
    # Regression: the date shown was the UTC day of the conversation's last update; for
    # an owner in New York an evening conversation showed as the day after.
    core.search.config.owner.timezone = "America/New_York"
    manager = core.conversations
    evening = await manager.create("web")  # 1 March 2999, 20:30 in New York
    await manager.append_turn(
        evening.id,
        "user",
        "we parked the kayak at the boathouse",
        timestamp="2999-03-02T01:30:00.000Z",
    )
    brain = OfflineBrain(core.search)
    reply = await brain.reply(
        BrainRequest(profile="owner", channel="web", text="where is the kayak?", model_alias="")
    )
    assert reply.text.startswith(OFFLINE_LABEL)
    assert "(web, 2999-03-01, " in reply.text


async def test_an_older_part_of_this_conversation_is_dated_when_it_was_said(
    core: SimpleNamespace,
) -> None:
    # Regression: the older turn listed from the current conversation was dated by the
    # message that asked for it (its best match), not by the day the answer was given.
    manager = core.conversations
    conv = (await manager.create("web")).id
    await manager.append_turn(
        conv,
        "user",
        "For the Kyoto trip the ryokan near Gion costs 32000 yen a night",
        timestamp="2999-01-05T10:00:00.000Z",
    )
    for n in range(12):
        await manager.append_turn(
            conv, "user", f"chatter {n} about the weather", timestamp="2999-03-01T10:00:00.000Z"
        )
    question = "what was the ryokan price per night in Kyoto again?"
    await manager.append_turn(conv, "user", question, timestamp="2999-03-01T10:05:00.000Z")
    reply = await OfflineBrain(core.search).reply(
        BrainRequest(
            profile="owner",
            channel="web",
            text=question,
            model_alias="",
            conversation_id=conv,
            turn_number=14,
        )
    )
    (line,) = [line for line in reply.text.splitlines() if "32000 yen" in line]
    assert "(web, 2999-01-05, turn 1)" in line


async def test_a_recalled_title_and_snippet_are_whole_and_isolated(
    core: SimpleNamespace,
) -> None:
    # Regression: the snippet was cut at 197 code points inside a family emoji, and a
    # Hebrew title pulled "(web, date, turns)" after it into its right-to-left run.
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    manager = core.conversations
    rec = await manager.create("web")
    await manager.append_turn(rec.id, "user", "kayak " + "y" * 190 + family * 10)
    await manager.rename(rec.id, "סירה 2")
    brain = OfflineBrain(core.search)
    reply = await brain.reply(
        BrainRequest(profile="owner", channel="web", text="the kayak?", model_alias="")
    )
    assert "1. \u2068סירה 2\u2069 (web, " in reply.text
    assert "kayak " + "y" * 190 + "..." in reply.text and "\U0001f468" not in reply.text


async def asker(core: SimpleNamespace, said: str) -> Callable[[str], Awaitable[list[str]]]:
    """After a web conversation where the owner said ``said``: a function giving the
    lines of the offline brain's answer to the owner's next message."""
    rec = await core.conversations.create("web")
    await core.conversations.append_turn(rec.id, "user", said)
    brain = OfflineBrain(core.search)

    async def ask(text: str) -> list[str]:
        request = BrainRequest(profile="owner", channel="web", text=text, model_alias="")
        return (await brain.reply(request)).text.splitlines()

    return ask


async def test_a_keyword_only_recall_says_so(core: SimpleNamespace) -> None:
    # Regression: without an embedding model only the message's own words are looked
    # for, and "Nothing related turned up" read as "never talked about it" (the other
    # doors say keyword-only: /search, my-agent search, the recall tool).
    ask = await asker(core, "we parked the kayak at the boathouse")

    found = await ask("where is the kayak?")
    assert found[1] == "From past conversations:" and found[2].startswith("1. ")
    assert found[-1] == f"({KEYWORD_ONLY})"
    assert (await ask("where is the canoe?"))[1] == (
        f"Nothing related turned up in past conversations. ({KEYWORD_ONLY})"
    )
    assert (await ask("👍"))[1] == "Nothing related turned up in past conversations."


async def test_nothing_close_in_words_or_meaning_is_not_recalled(core: SimpleNamespace) -> None:
    # Regression: with a model, a message about nothing in the store still had nearest
    # conversations, listed "From past conversations" as if related to it.

    manager = core.conversations
    rec = await manager.create("web")
    await manager.append_turn(rec.id, "user", "we parked the kayak at the boathouse")
    search = Relabelled(core.search, method="hybrid", match="loose")
    brain = OfflineBrain(search)  # type: ignore[arg-type]
    request = BrainRequest(profile="owner", channel="web", text="the kayak?", model_alias="")
    lines = (await brain.reply(request)).text.splitlines()
    assert lines[1] == "Nothing related turned up in past conversations."
    for match in ("meaning", "date"):  # close in meaning, or held on the day it names
        search.changes["match"] = match
        lines = (await brain.reply(request)).text.splitlines()
        assert lines[1] == "From past conversations:" and lines[2].startswith("1. "), match


async def test_the_words_that_ask_for_recall_are_not_searched(core: SimpleNamespace) -> None:
    # Regression: "remember when we talked about my dentist appointment?" was searched
    # word for word, and "remember" found every conversation where someone said
    # "remember to ...": the kayak trip was recalled for the dentist.
    ask = await asker(core, "Remember to check the lock, kayaks must portage")

    asked = await ask("remember when we talked about my dentist appointment?")
    assert asked[1].startswith("Nothing related turned up"), asked
    found = await ask("do you remember what we discussed about the kayaks?")
    assert found[1] == "From past conversations:" and "portage" in found[2]
    # nothing but the asking: its words are searched after all
    assert (await ask("remember?"))[1] == "From past conversations:"


async def test_the_reply_to_a_pasted_log_reads_only_a_bounded_part_of_it(
    core: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression (session 40): the snippet of an older log in the same thread looked for
    # every distinct word of the new one (50,000 for 1 MB, one scan of the old log
    # each), and the message's words were read whole once per result: a reply held the
    # event loop 25-44 s and systemd's watchdog killed the daemon.
    body = " ".join(f"req{i:06d}" for i in range(30_000))  # 300 KB, all words distinct
    manager = core.conversations
    conv = (await manager.create("email")).id
    await manager.append_turn(conv, "user", f"yesterday checkout log\n{body}")
    for n in range(11):
        await manager.append_turn(conv, "user", f"short note {n} about the checkout")
    message = f"today checkout log, payment timeouts again\n{body} req999999"
    await manager.append_turn(conv, "user", message)
    read: list[int] = []  # the length of each text the reply took the words of
    snippets: list[tuple[int, bool]] = []  # (terms looked for, on the event loop)

    def words(text: str, **kwargs: bool) -> list[str]:
        read.append(len(text))
        return query_terms(text, **kwargs)

    def shown(text: str, terms: list[str]) -> str:
        snippets.append((len(terms), threading.current_thread() is threading.main_thread()))
        return snippet(text, terms)

    monkeypatch.setattr(offline, "query_terms", words)
    monkeypatch.setattr(offline, "snippet", shown)
    reply = await OfflineBrain(core.search).reply(
        BrainRequest(
            profile="owner",
            channel="email",
            text=message,
            model_alias="",
            conversation_id=conv,
            turn_number=13,
        )
    )
    (line,) = [line for line in reply.text.splitlines() if "turn 1)" in line]
    assert "yesterday checkout log" in line
    assert read and max(read) <= len(message) // 10  # (WORDS_CHARS: 20,000)
    # the search's own query's terms (each a word and a separator at least), off the loop
    assert snippets and all(n <= MAX_QUERY_CHARS // 2 and not loop for n, loop in snippets)
