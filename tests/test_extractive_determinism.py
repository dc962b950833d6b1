"""The extractive abbreviation is the same in every process (SPEC.md: deterministic).

Sentences made of the same words in another order score the same; summing their word
weights over a ``set`` added them in hash order, which changes with ``PYTHONHASHSEED``,
so the last bit of the sum (and the choice between such sentences) changed between runs:
the LoCoMo benchmark rebuilt "unchanged" stores and abbreviations moved under restarts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import random, sys
from bot.extractive import extractive_abbreviation
VOCAB = ("garden river museum painting guitar coffee bakery marathon puppy violin camping "
         "pottery").split()
for seed in (35, 53, 7):
    rng = random.Random(seed)
    turns = []
    for i in range(30):
        words = rng.sample(VOCAB, 7)
        rng.shuffle(words)
        turns.append(("user" if i % 2 else "assistant",
                      "We talked about " + " ".join(words) + ".", "A" if i % 2 else "B"))
    sys.stdout.write(extractive_abbreviation(turns) + "\\n---\\n")
"""


def _start(hash_seed: str) -> subprocess.Popen[str]:
    env = {"PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, text=True
    )


def _output(process: subprocess.Popen[str]) -> str:
    stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 0, process.returncode  # its traceback is on stderr
    return stdout


def test_same_abbreviation_under_every_hash_seed() -> None:
    # the four processes at once: most of each is the interpreter's start, and a CI
    # machine has more than one core
    processes = [_start(seed) for seed in ("1", "2", "3", "4")]
    outputs = {_output(p) for p in processes}
    assert len(outputs) == 1
    assert "Key points:" in next(iter(outputs))
