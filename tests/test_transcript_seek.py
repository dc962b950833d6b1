"""bot.transcript_seek: lines backward and forward from byte offsets, and a turn's line
found by bisection, agree with reading the whole file (small blocks exercise the joins)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bot import transcript_seek
from bot.transcript_lines import encode, event_line, parse_lines, turn_line
from bot.transcript_seek import LineReader


def _transcript(turns: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    lines: list[dict] = [{"type": "meta", "id": "conv-x"}]
    late: list[dict] = []
    for n in range(1, turns + 1):
        if rng.random() < 0.3:
            lines.append(event_line("compression", summary="s" * rng.randint(0, 90)))
        lines.append(turn_line("user", "u" * rng.randint(0, 300), n))
        lines += late
        answer = turn_line("assistant", "a" * rng.randint(0, 300), n)
        # Now and then an answer is written after the next question (5 5 6 6 -> 5 6 5 6).
        late = [answer] if rng.random() < 0.2 else []
        if not late:
            lines.append(answer)
    return lines + late


@pytest.mark.parametrize("block", [1, 7, 64, 65536])
def test_backward_forward_and_turn_offset_agree_with_a_whole_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(transcript_seek, "BLOCK", block)
    lines = _transcript(40)
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode(lines) + b'{"type":"turn","ro')  # a torn last line
    with LineReader(path) as reader:
        assert reader.end == len(encode(lines))
        backward = [reader.parse(raw) for _, raw in reader.backward(reader.end)]
        forward = [reader.parse(raw) for _, _, raw in reader.forward(0)]
        assert forward == lines and backward == lines[::-1]
        starts = [start for start, _, _ in reader.forward(0)]
        for number in range(0, 43):
            first = next(
                (
                    i
                    for i, ln in enumerate(lines)
                    if ln["type"] == "turn" and ln["turnNumber"] >= number
                ),
                None,
            )
            expected = reader.end if first is None else starts[first]
            assert reader.turn_offset(number) == expected, number


def test_corrupt_lines_are_skipped_like_a_whole_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    data = encode(_transcript(3)[:3]) + b"not json\n\n" + encode(_transcript(3)[3:])
    path.write_bytes(data)
    with LineReader(path) as reader:
        parsed = [reader.parse(raw) for _, _, raw in reader.forward(0)]
    assert [ln for ln in parsed if ln is not None] == parse_lines(data)


def test_an_empty_file_has_no_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    with LineReader(path) as reader:
        assert reader.end == 0 and list(reader.backward(0)) == [] and reader.turn_offset(1) == 0


@pytest.mark.parametrize("block", [7, 64, 65536])
def test_turn_offset_with_answers_written_after_a_flood(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    # Regression: replies to group members wait out a flood of messages (bot/arrivals.py),
    # so 40 questions come before their 40 answers; a probe that landed on an answer
    # took the bisection past the question sought (more than BACK_TURNS turns back).
    monkeypatch.setattr(transcript_seek, "BLOCK", block)
    lines: list[dict] = [{"type": "meta", "id": "conv-x"}]
    lines += [turn_line("user", f"question {n} " + "q" * 80, n) for n in range(1, 41)]
    lines += [turn_line("assistant", f"answer {n} " + "a" * 80, n) for n in range(1, 41)]
    lines += [turn_line("user", "later", 41), turn_line("assistant", "later too", 41)]
    path = tmp_path / "t.jsonl"
    path.write_bytes(encode(lines))
    with LineReader(path) as reader:
        starts = [start for start, _, _ in reader.forward(0)]
        for number in range(1, 43):
            first = next(
                (i for i, ln in enumerate(lines) if ln.get("turnNumber", 0) >= number), None
            )
            expected = reader.end if first is None else starts[first]
            assert reader.turn_offset(number) == expected, number
