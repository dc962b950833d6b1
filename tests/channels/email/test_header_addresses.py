"""Addresses read from a header's free text (X-Loop, a bounce's Final-Recipient,
X-Failed-Recipients): the same as the pattern they were read with, in one pass."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

from channels.email.decoding import addresses_in

REPO = Path(__file__).resolve().parents[3]
# what dsn.py, receipts.py and parsing.py matched with, each its own copy, until session 30
_PATTERN = re.compile(r"[^\s<>,;:\"()\[\]]+@[^\s<>,;:\"()\[\]]+")


def test_the_addresses_are_those_the_pattern_found() -> None:
    assert addresses_in("rfc822; Kim <KIM@example.org>, x@y;z@") == ["KIM@example.org", "x@y"]
    assert addresses_in("@lead a@@b trail@ a@b@c") == ["a@@b", "a@b@c"]
    rng = random.Random(30)
    alphabet = 'ab@ <>,;:"()[]\t.'
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        assert addresses_in(text) == _PATTERN.findall(text), text


def test_a_megabyte_header_is_read_in_one_pass() -> None:
    # Regression (session 30): the pattern tried every start in a run without an "@":
    # an X-Loop header of 30,000 letters took 6 s to read, a megabyte would take hours,
    # and anyone may send one. Read in a child process, bounded far above what one pass
    # takes (well under a second), far below what the pattern took.
    raw = b"From: kim@example.org\r\nX-Loop: " + b"a" * 1_000_000 + b"\r\n\r\nhello\r\n"
    code = (
        "import sys\n"
        "from channels.email.parsing import parse_message\n"
        "mail = parse_message(sys.stdin.buffer.read())\n"
        "print(len(mail.loop_addresses), mail.text)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=raw, capture_output=True, cwd=REPO, timeout=90
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["0", "hello"]
