"""The synthetic store of ``my-agent bench search`` (:mod:`bot.bench.search`).

``--conversations`` N conversations x ``--turns`` turns, written straight into a fresh
``conversations.db`` with the product's schema: turns and their FTS rows (words drawn from
a Zipf-like vocabulary, so postings look like language), one abbreviation per
conversation (also in ``notes``, migration 10), a title of 2-4 vocabulary words (also in
``titles``, migration 12; one conversation in ten renamed by the owner, the titles search
weighs), and one random unit vector per turn window
and per abbreviation (random vectors cost the same to search as model vectors; embedding
2M texts would take hours and measure nothing about search), and, with
``search.soft_coverage`` on, one random unit vector per vocabulary word in
``term_vectors`` (the learned ranker's soft coverage reads them). The bench's queries are
drawn from the same vocabulary (:func:`vocabulary`).
"""

from __future__ import annotations

import random

import numpy as np

from bot.db import SyncConn
from bot.schema import create_vector_tables
from bot.schema_titles import title_text
from bot.term_vectors import META_KEY as TERMS_KEY
from bot.term_vectors import store as store_terms
from bot.vector_codec import sign_bits, to_blob, to_half

VOCABULARY_SIZE = 5000


def vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    """``VOCABULARY_SIZE`` random words of 3-9 letters and their Zipf weights (s = 1)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = list(
        dict.fromkeys(
            "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
            for _ in range(VOCABULARY_SIZE * 2)
        )
    )[:VOCABULARY_SIZE]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, s = 1
    return words, weights


def _unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    v = rng.standard_normal((n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def generate(conn: SyncConn, conversations: int, turns: int, dims: int, seed: int = 11) -> None:
    """Fill an empty index with the synthetic store (one transaction per 500 conversations)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    words, weights = vocabulary(rng)
    # Titles of 2-4 words drawn evenly from the vocabulary (a title names what is
    # particular to a conversation, not its commonest words), from their own generator:
    # the turns, notes and vectors are those of a store generated before titles were.
    title_rng = random.Random(seed + 7)
    create_vector_tables(conn, dims)
    turn_id = 0
    for start in range(0, conversations, 500):
        batch = range(start, min(conversations, start + 500))
        conn.execute("BEGIN")
        conv_rows, turn_rows, fts_rows, bit_rows, vec_rows, abbr_rows = [], [], [], [], [], []
        vectors = _unit(nrng, len(batch) * turns, dims)
        bits = sign_bits(vectors)
        abbr_vectors = _unit(nrng, len(batch), dims)
        for k, c in enumerate(batch):
            conv_id = f"conv-{c:07d}"
            day = f"2025-{1 + c % 12:02d}-{1 + c % 28:02d}"
            abbreviation = " ".join(rng.choices(words, weights, k=60))
            conv_rows.append(
                (
                    conv_id,
                    "web" if c % 3 else "telegram",
                    " ".join(title_rng.choices(words, k=title_rng.randint(2, 4))).title(),
                    "[]",
                    f"{day}T10:00:00Z",
                    f"{day}T11:00:00Z",
                    turns,
                    abbreviation,
                    int(c % 10 == 0),  # one in ten renamed by the owner
                )
            )
            abbr_rows.append((conv_id, to_blob(abbr_vectors[k])))
            for t in range(turns):
                turn_id += 1
                text = " ".join(rng.choices(words, weights, k=rng.randint(8, 40)))
                ts = f"{day}T10:{t % 60:02d}:00Z"
                role = "user" if t % 2 == 0 else "assistant"
                turn_rows.append((turn_id, conv_id, t // 2 + 1, role, text, ts, "web", role))
                fts_rows.append((turn_id, text, conv_id, t // 2 + 1, ts))
                row = k * turns + t
                vec_rows.append((turn_id, to_blob(vectors[row])))
                bit_rows.append(
                    (turn_id, conv_id, turn_id, bits[row].tobytes(), to_half(vectors[row]))
                )
        conn.executemany(
            "INSERT INTO conversations (id, channel, title, topics, created, updated, "
            "turn_count, abbreviation, manually_named) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            conv_rows,
        )
        conn.executemany(
            "INSERT INTO turns (id, conversation_id, turn_number, role, content, timestamp, "
            "channel, sender) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            turn_rows,
        )
        conn.executemany(
            "INSERT INTO turns_fts (rowid, content, conversation_id, turn_number, timestamp) "
            "VALUES (?, ?, ?, ?, ?)",
            fts_rows,
        )
        conn.executemany("INSERT INTO turns_vec (rowid, embedding) VALUES (?, ?)", vec_rows)
        conn.executemany(
            "INSERT INTO turn_vectors (turn_id, conversation_id, window_last, bits, vector) "
            "VALUES (?, ?, ?, ?, ?)",
            bit_rows,
        )
        conn.executemany(
            "INSERT INTO abbreviations_vec (conversation_id, embedding) VALUES (?, ?)", abbr_rows
        )
        conn.executemany(
            "INSERT INTO abbreviation_vectors (conversation_id, text_hash, vector) "
            "VALUES (?, 'synthetic', ?)",
            [(r[0], to_half(v)) for r, v in zip(abbr_rows, abbr_vectors, strict=True)],
        )
        # the notes' keyword index (migration 10; its triggers fill notes_fts)
        conn.executemany(
            "INSERT INTO notes (conversation_id, text) VALUES (?, ?)",
            [(r[0], r[7]) for r in conv_rows],
        )
        # the titles' keyword index (migration 12; its triggers fill titles_fts)
        conn.executemany(
            "INSERT INTO titles (conversation_id, text, manual) VALUES (?, ?, ?)",
            [(r[0], title_text(r[2]), r[8]) for r in conv_rows],
        )
        conn.execute("COMMIT")


def add_term_vectors(conn: SyncConn, dims: int, model_id: str, seed: int = 13) -> int:
    """One random unit vector per vocabulary word in ``term_vectors`` (the soft-coverage
    features read them like model vectors), unless the store has them already (a store
    generated before the table existed is completed). Returns the words added."""
    if conn.execute("SELECT 1 FROM term_vectors LIMIT 1").fetchone() is None:
        words, _ = vocabulary(random.Random(11))
        vectors = _unit(np.random.default_rng(seed), len(words), dims)
        store_terms(conn, words, vectors)
        added = len(words)
    else:
        added = 0
    conn.execute(
        "INSERT OR REPLACE INTO index_meta (key, value) VALUES (?, ?)", (TERMS_KEY, model_id)
    )
    return added
