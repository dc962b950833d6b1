"""Pages of big conversations (channels.web.pages): the same pages as views.page_of over
the whole transcript, at a cost in proportion to the page, bounded in bytes."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import transcript_seek
from bot.transcript_lines import encode, event_line, turn_line
from channels.web import pages
from channels.web.pages import TURN_CHARS, read_page, read_turn
from channels.web.views import line_views, page_of
from tests.channels.web.conftest import Stack

IO = Path("/proc/self/io")


def _random_transcript(rng: random.Random) -> list[dict]:
    lines: list[dict] = [{"type": "meta", "id": "conv-x"}]
    late: list[dict] = []
    flood = rng.random() < 0.3  # answers written after a whole flood (bot/arrivals.py)
    for n in range(1, rng.randint(0, 40) + 1):
        if rng.random() < 0.2:
            lines.append(event_line(rng.choice(["compression", "pinned", "not_shown"]), text="e"))
        lines.append(turn_line("user", "u" * rng.randint(0, 200), n))
        if not flood or rng.random() < 0.1:  # a flood's answers come when it pauses
            lines += late
            late = []
        if rng.random() < 0.2:
            lines.append(event_line("error", text="failed"))
        answer = turn_line("assistant", "a" * rng.randint(0, 200), n)
        if flood or rng.random() < 0.15:  # written after the next question (5 6 5 6)
            late.append(answer)
        elif rng.random() < 0.9:  # now and then a question left unanswered
            lines.append(answer)
    return lines + late


def _trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: random.Random, count: int
) -> Iterator[tuple[int, Path, list[dict], int]]:
    """``(trial, transcript path, its items, page limit)`` of ``count`` random
    transcripts (every third with a torn last line), read in blocks of random sizes."""
    for trial in range(count):
        monkeypatch.setattr(transcript_seek, "BLOCK", rng.choice([16, 200, 65536]))
        lines = _random_transcript(rng)
        path = tmp_path / f"{trial}.jsonl"
        path.write_bytes(encode(lines) + (b'{"torn' if trial % 3 == 0 else b""))
        yield trial, path, line_views(lines), rng.randint(1, 12)


def test_pages_are_those_of_page_of_over_the_whole_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for trial, path, items, limit in _trials(tmp_path, monkeypatch, random.Random(20), 60):
        numbers = range(0, len(items) + 3)  # every turn number, and past the last
        for kwargs in [{}, *({"before": n} for n in numbers), *({"around": n} for n in numbers)]:
            expected, more = page_of(items, limit=limit, **kwargs)
            page = read_page(path, limit=limit, max_bytes=10**9, **kwargs)
            assert (page.items, page.has_more) == (expected, more), (trial, limit, kwargs)
            if "before" not in kwargs:
                assert page.has_newer == (bool(expected) and expected[-1] is not items[-1])


def _rchar() -> int:
    for row in IO.read_text().splitlines():
        if row.startswith("rchar:"):
            return int(row.split()[1])
    raise AssertionError("no rchar")


async def _conversation(stack: Stack, turns: list[tuple[int, str, str]]) -> str:
    rec = await stack.services.conversations.create(channel="web")
    lines = [turn_line(role, text, n) for n, role, text in turns]
    for i in range(0, len(lines), 5000):
        await stack.services.store.append(rec.id, lines[i : i + 5000])
    return rec.id


def test_paging_older_from_a_page_shows_every_item_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: "Load older messages" asked for the items before the page's first turn
    # number. After a flood (questions 1-60, then their answers) the last page held
    # answers 11-60, the next one the items before question 11: questions 11-60 and
    # answers 1-10 were never shown. Each page now names where it begins (``start``).
    rng = random.Random(24)
    for trial, path, items, limit in _trials(tmp_path, monkeypatch, rng, 30):
        for kwargs in [{}, *({"around": n} for n in range(1, 42, 10))]:
            page = read_page(path, limit=limit, max_bytes=rng.choice([300, 10**9]), **kwargs)
            shown = list(page.items)
            while page.has_more:
                assert page.start is not None
                page = read_page(path, limit=limit, older_than=page.start)
                assert page.items, (trial, kwargs)
                shown[:0] = page.items
            assert shown == items[: len(shown)], (trial, limit, kwargs)
            if not kwargs:
                assert shown == items, (trial, limit)


def test_paging_newer_from_a_page_around_a_turn_shows_every_item_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a page opened around an old turn (a search result) had no way on but
    # "Jump to the latest": the turns between it and the latest page were not shown by
    # scrolling down. Each page now names where the next newer one begins (``end``).
    rng = random.Random(27)
    for trial, path, items, limit in _trials(tmp_path, monkeypatch, rng, 30):
        for around in range(1, 42, 5):
            page = read_page(path, limit=limit, max_bytes=rng.choice([300, 10**9]), around=around)
            shown = list(page.items)
            while page.has_newer:
                assert page.end is not None
                page = read_page(
                    path, limit=limit, max_bytes=rng.choice([300, 10**9]), newer_than=page.end
                )
                assert page.items, (trial, around)
                shown += page.items
            assert page.end is None
            assert shown == items[len(items) - len(shown) :], (trial, limit, around)


def test_the_latest_page_after_a_flood_leads_to_every_question(tmp_path: Path) -> None:
    lines: list[dict] = [{"type": "meta", "id": "conv-x"}]
    lines += [turn_line("user", f"question {n}", n) for n in range(1, 61)]
    lines += [turn_line("assistant", f"answer {n}", n) for n in range(1, 61)]
    path = tmp_path / "flood.jsonl"
    path.write_bytes(encode(lines))
    latest = read_page(path, limit=50)
    assert [it["content"] for it in latest.items] == [f"answer {n}" for n in range(11, 61)]
    older = read_page(path, limit=50, older_than=latest.start)
    assert [it["content"] for it in older.items][-10:] == [f"answer {n}" for n in range(1, 11)]
    assert older.items[-11]["content"] == "question 60"


@pytest.mark.skipif(not IO.exists(), reason="needs /proc/self/io (Linux)")
@pytest.mark.asyncio(loop_scope="module")
async def test_a_page_of_a_long_conversation_reads_about_the_page(stack: Stack, client) -> None:
    # 10,000 turns, 4 MB: every page read and parsed all of it (1.4 s and 52 MB of
    # Python objects a page at 20,000 turns).
    turns = [
        (n, role, f"{role} {n} " + "x" * 180)
        for n in range(1, 10_001)
        for role in ("user", "assistant")
    ]
    cid = await _conversation(stack, turns)
    assert stack.services.store.path(cid).stat().st_size > 4_000_000
    for params, check in (
        ({}, lambda t: t[-1]["turnNumber"] == 10_000),
        ({"before": "100"}, lambda t: t[-1]["turnNumber"] == 99),
        ({"around": "5000"}, lambda t: 5000 in {x["turnNumber"] for x in t}),
    ):
        read = _rchar()
        async with client.get(f"{stack.url}/api/conversations/{cid}", params=params) as r:
            body = await r.json()
        read = _rchar() - read
        assert len(body["turns"]) == 50 and check(body["turns"]), params
        assert read < 500_000, (params, read)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_page_is_bounded_in_bytes_and_a_cut_turn_shows_whole_on_request(
    stack: Stack, client
) -> None:
    # Twelve messages of 1 MB each: the page of 50 sent all 12 MB to the browser.
    big = [
        (n, role, f"{role} {n} " + "y" * 1_000_000)
        for n in range(1, 7)
        for role in ("user", "assistant")
    ]
    cid = await _conversation(stack, big)
    async with client.get(f"{stack.url}/api/conversations/{cid}") as r:
        raw = await r.read()
        body = await r.json()
    assert len(raw) <= pages.PAGE_BYTES + 4 * TURN_CHARS
    assert body["hasMore"] is True and body["turns"][-1]["turnNumber"] == 6
    last = body["turns"][-1]
    assert last["cut"] == {"shown": TURN_CHARS, "total": len(big[-1][2])}
    assert last["content"] == big[-1][2][:TURN_CHARS]
    url = f"{stack.url}/api/conversations/{cid}/turns/6"
    async with client.get(url, params={"role": "assistant"}) as r:
        assert (await r.json())["turn"]["content"] == big[-1][2]
    async with client.get(url, params={"role": "nobody"}) as r:
        assert r.status == 400
    async with client.get(
        f"{stack.url}/api/conversations/{cid}/turns/9", params={"role": "user"}
    ) as r:
        assert r.status == 404
    # Paging on from there reaches the first turn, a bounded page at a time.
    seen, before = [], body["turns"][0]["turnNumber"]
    while True:
        async with client.get(
            f"{stack.url}/api/conversations/{cid}", params={"before": before}
        ) as r:
            page = await r.json()
        seen += page["turns"]
        if not page["hasMore"]:
            break
        before = page["turns"][0]["turnNumber"]
    assert seen and seen[-1]["turnNumber"] < 6 and min(t["turnNumber"] for t in seen) == 1


def test_show_all_finds_an_answer_written_after_the_next_question(tmp_path: Path) -> None:
    # A message sent while the reply to the one before was written is stored first.
    path = tmp_path / "t.jsonl"
    order = [(1, "user"), (2, "user"), (1, "assistant"), (2, "assistant")]
    path.write_bytes(encode([turn_line(role, f"{role} {n}", n) for n, role in order]))
    assert read_turn(path, 1, "assistant")["content"] == "assistant 1"
    assert read_turn(path, 2, "assistant")["content"] == "assistant 2"
    assert read_turn(path, 3, "user") is None


def test_show_all_finds_an_answer_written_after_a_flood(tmp_path: Path) -> None:
    # Regression: the 40 answers to a flood of group messages come after all 40
    # questions (bot/arrivals.py); Show all gave up 16 turns past the question.
    path = tmp_path / "t.jsonl"
    lines = [turn_line("user", f"user {n}", n) for n in range(1, 41)]
    lines += [turn_line("assistant", f"assistant {n}", n) for n in range(1, 41)]
    path.write_bytes(encode(lines))
    for n in (1, 20, 40):
        assert read_turn(path, n, "assistant")["content"] == f"assistant {n}"
        assert read_turn(path, n, "user")["content"] == f"user {n}"
