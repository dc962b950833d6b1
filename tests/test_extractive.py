"""Offline extractive abbreviation, keyword titles and topics: deterministic and bounded."""

from __future__ import annotations

import re
import subprocess
import sys

from bot.extractive import (
    HEADER,
    entities,
    extractive_abbreviation,
    kebab,
    keyword_title,
    keyword_topics,
)

TURNS = [
    ("user", "Hi there! How are you?", "Owner"),
    ("assistant", "Hello! I'm fine, thanks.", "Assistant"),
    (
        "user",
        "We need to migrate the billing database from Postgres 12 to Postgres 16 before "
        "the March 15 deadline.",
        "Owner",
    ),
    (
        "assistant",
        "The billing database migration can use logical replication so the downtime stays "
        "under five minutes. Sarah Chen from the platform team ran the last upgrade.",
        "Assistant",
    ),
    (
        "user",
        "Ok. We decided to schedule the billing migration for the weekend of March 8.",
        "Owner",
    ),
    (
        "assistant",
        "Should the reporting replicas of the billing database move at the same time?",
        "Assistant",
    ),
    ("user", "Thanks a lot!", "Owner"),
    ("assistant", "You're welcome. Bye!", "Assistant"),
]


def test_abbreviation_shape_and_content() -> None:
    text = extractive_abbreviation(TURNS)
    lines = text.splitlines()
    assert lines[0] == HEADER
    assert lines[1] == "Participants: Owner, Assistant."
    body = "\n".join(lines[1:])
    assert "Postgres 16" in body and "March 15" in body
    assert any(line.startswith("Decisions:") and "decided" in line for line in lines)
    assert any(line.startswith("Open questions:") and "replicas" in line for line in lines)
    assert "Sarah Chen" in text
    # no pleasantries
    for pleasantry in ("How are you", "thanks", "Bye", "welcome", "Hi there"):
        assert pleasantry.lower() not in body.lower(), pleasantry
    assert len(text.split()) <= 200


def test_abbreviation_length_bounded_for_long_conversations() -> None:
    long_turns = [
        (
            "user" if i % 2 == 0 else "assistant",
            f"Topic number {i} covers the Kubernetes cluster autoscaler settings for node pool "
            f"pool-{i} and the Grafana dashboard alerting thresholds we reviewed on day {i}.",
            None,
        )
        for i in range(80)
    ]
    text = extractive_abbreviation(long_turns)
    assert 100 <= len(text.split()) <= 200


def test_deterministic() -> None:
    assert extractive_abbreviation(TURNS) == extractive_abbreviation(list(TURNS))
    assert keyword_title(TURNS) == keyword_title(list(TURNS))
    assert keyword_topics(TURNS) == keyword_topics(list(TURNS))


def test_empty_and_trivial() -> None:
    assert extractive_abbreviation([]) == ""
    title = keyword_title([("user", "hi", None)])
    assert 2 <= len(title.split()) <= 6
    assert keyword_topics([("user", "hi", None)]) == []


def test_title_rules() -> None:
    title = keyword_title(TURNS)
    words = title.split()
    assert 2 <= len(words) <= 6
    assert len(title) <= 80
    assert all(w[0].isupper() for w in words)
    assert "billing" in title.lower()
    assert "owner" not in title.lower()
    long_words = [
        ("user", " ".join(["supercalifragilistic" + str(i)] * 3), None) for i in range(10)
    ]
    assert len(keyword_title(long_words)) <= 80


def test_titles_and_topics_skip_words_without_a_subject() -> None:
    turns = [
        ("user", "We need to renew the passport before the Japan trip in March", None),
        ("user", "The passport office in Leeds has appointments on Tuesdays", None),
        ("user", "Please remember that Tom needs a passport photo", None),
    ]
    title = keyword_title(turns)
    assert "Passport" in title.split() and "Japan" in title.split()
    assert not {"Need", "Needs", "Please", "Remember"} & set(title.split())
    assert not {"need", "needs", "please", "remember"} & set(keyword_topics(turns))


def test_topics_kebab_case() -> None:
    topics = keyword_topics(TURNS)
    assert topics and len(topics) <= 4
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", t) for t in topics)
    assert "billing" in topics
    assert kebab("Sarah Chen!") == "sarah-chen"


def test_entities_skip_greetings_and_participants() -> None:
    turns = [
        ("user", "Hey Mel! I met Sarah Chen at the Berlin office.", "Caroline"),
        ("assistant", "Thanks Caroline, did Sarah Chen like Berlin?", "Melanie"),
    ]
    names = entities(turns)
    assert names[0] == "Sarah Chen"
    assert "Berlin" in names
    assert not any(n in ("Hey Mel", "Mel", "Caroline", "Thanks Caroline") for n in names)


def test_numbers_with_stops_stay_whole_and_never_crash() -> None:
    # Regression: a stop inside a number split the sentence there ("release 2." /
    # "14 ..."), and a word of the pieces ("19.") missing from the turn's own words
    # divided by a document frequency of 0: the conversation never got its notes.
    for text in (
        "The meeting moved to 10.30 today.",
        "Ticket price is 19.99 dollars.",
        "My weight is 72.5 kg.",
        "The server IP address is 10.0.4.17 now.",
        "The invoice total was 1,249.50 euros including the 3.5 percent fee.",
        "The bug was changed in release 2.14 and we roll back to release 2.13 tonight.",
    ):
        notes = extractive_abbreviation([("user", text, "Ann")])
        assert f"Key points: Ann: {text}" in notes


def test_a_line_without_a_stop_is_a_sentence() -> None:
    turns = [("user", "Booked the ferry to Hydra for Friday\nThe hotel is still open", "Ann")]
    notes = extractive_abbreviation(turns)
    assert "Booked the ferry to Hydra for Friday" in notes
    assert "The hotel is still open" in notes


def test_a_huge_line_without_a_stop_is_handled_in_linear_time() -> None:
    # The old sentence pattern backtracked over every start of such a line (quadratic,
    # holding the GIL: the whole daemon froze, for hours on a pasted log of a few MB).
    # Run in a child process so a regression fails here instead of hanging the suite.
    code = (
        "from bot.extractive import extractive_abbreviation, keyword_title\n"
        "text = 'word ' * 400_000 + '\\nend of the log'\n"
        "assert extractive_abbreviation([('user', text, 'Ann')])\n"
        "assert keyword_title([('user', text, 'Ann')])\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
