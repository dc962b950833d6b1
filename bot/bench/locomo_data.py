"""The LoCoMo data set as ``my-agent bench locomo`` (bot.bench.long_memory) reads it.

:func:`load_samples` turns each conversation of the JSON file into a :class:`Sample`:
its sessions in order, each dated (:func:`session_timestamp`) with its turns as
``(dia_id, speaker, "<speaker>: <text>")`` (``[shares <caption>]`` appended), and its
questions of categories 1-4 whose evidence names turns that exist. The file is read
where it lies and never copied.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bot.bench.locomo_metrics import CATEGORIES

_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION_DATE = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november "
        "december".split(),
        start=1,
    )
}


def session_timestamp(text: str) -> str:
    """``"1:56 pm on 8 May, 2023"`` -> ISO timestamp (UTC)."""
    m = _SESSION_DATE.search(text or "")
    if not m:
        return "2000-01-01T00:00:00Z"
    hour, minute, half, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    month_no = _MONTHS.get(month.lower(), 1)
    stamp = datetime(int(year), month_no, int(day), h, int(minute), tzinfo=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Sample:
    """One LoCoMo conversation: sessions of (dia_id, speaker, text) and its questions."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: list[tuple[int, str, list[tuple[str, str, str]]]]
    questions: list[tuple[str, int, set[str]]] = field(default_factory=list)


def load_samples(path: Path) -> list[Sample]:
    data = json.loads(path.read_text())
    samples = []
    for item in data:
        conv = item["conversation"]
        sessions = []
        for key, value in conv.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not isinstance(value, list):
                continue
            number = int(m.group(1))
            turns = []
            for turn in value:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                turns.append((str(turn["dia_id"]), str(turn["speaker"]), text))
            stamp = session_timestamp(conv.get(f"session_{number}_date_time", ""))
            sessions.append((number, stamp, turns))
        sessions.sort()
        sample = Sample(
            str(item.get("sample_id")), (conv["speaker_a"], conv["speaker_b"]), sessions
        )
        valid = {dia for _, _, turns in sessions for dia, _, _ in turns}
        for qa in item.get("qa", []):
            category = int(qa.get("category", 0))
            if category not in CATEGORIES:
                continue
            evidence = set()
            for ev in qa.get("evidence", []):
                for m in _EVIDENCE.finditer(str(ev)):
                    dia = f"D{int(m.group(1))}:{int(m.group(2))}"
                    if dia in valid:
                        evidence.add(dia)
            if evidence:
                sample.questions.append((str(qa["question"]), category, evidence))
        samples.append(sample)
    return samples
