"""Typed config sections of recall: ``embedding`` (the model that turns text into
vectors) and ``search`` (how hybrid search weighs and ranks, docs/search.md). Part of
:class:`bot.config.model.AppConfig`, which re-exports them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from bot.config.channels import OptionalText, _Section

MAX_THREADS = 256  # embedding.threads at most


class EmbeddingConfig(_Section):
    enabled: bool = True
    model_name: str = "sentence-transformers/all-MiniLM-L6-v2"
    model_path: OptionalText = None  # overridden by MY_AGENT_EMBEDDING_MODEL_PATH
    # where a model fastembed downloads is kept (default: <data_dir>/models, which
    # survives restarts; fastembed's own default is in /tmp, private to a systemd unit)
    cache_dir: str | None = None
    dimensions: int = Field(default=384, ge=8, le=4096)
    batch_size: int = Field(default=32, ge=1)
    # onnxruntime makes one OS thread per unit at the load: 100000 never finished loading
    # (before session 39 nothing bounded it); more than the cores gains nothing anyway
    threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    turn_window: int = Field(default=1, ge=0, le=5)  # neighbours on each side of a turn


class SearchConfig(_Section):
    """Hybrid search (docs/search.md); defaults tuned on the LoCoMo development slice."""

    method: Literal["weighted", "rrf"] = "weighted"
    keyword_weight: float = Field(default=0.5, ge=0, le=1)
    vector_weight: float = Field(default=0.5, ge=0, le=1)
    rrf_k: int = Field(default=60, ge=1)
    candidates: int = Field(default=50, ge=1, le=2000)  # per source (FTS, turn KNN)
    default_limit: int = Field(default=10, ge=1, le=100)
    # keyword scores are averaged with their +-1..N turn windows
    keyword_window: int = Field(default=3, ge=0, le=10)
    # vector scores: the embedded window plus centroids of +-1..N neighbouring windows
    vector_window: int = Field(default=2, ge=0, le=5)
    expand: int = Field(default=30, ge=0, le=1000)  # best hits per source loaded with windows
    vector_full: float = Field(default=0.6, ge=0, le=1)  # cosine that counts as a full match
    conversation_weight: float = Field(default=0.3, ge=0, le=2)  # best turn of the conversation
    abbreviation_weight: float = Field(default=0.3, ge=0, le=2)  # abbreviation similarity
    participant_weight: float = Field(default=0.2, ge=0, le=2)  # turns by a person named
    date_weight: float = Field(default=0.3, ge=0, le=2)  # turns on a date the query names
    # the nearest turns of the days a query names join the candidates (bot/search/pool.py)
    date_candidates: int = Field(default=50, ge=0, le=500)
    time_weight: float = Field(default=0.1, ge=0, le=2)  # time words, for "when" questions
    # a turn that asks a question passes this share of its score to the reply after it
    answer_weight: float = Field(default=0.8, ge=0, le=1)
    # turns that say more are likelier to hold the fact asked for: +length_weight at
    # length_full characters and above, proportionally less below
    length_weight: float = Field(default=0.2, ge=0, le=2)
    length_full: int = Field(default=200, ge=1, le=100_000)
    # the conversation list (not the turns): + coverage_weight x the share of the query's
    # words found in its candidate turns, + abbreviation_rank_weight x its abbreviation
    # similarity (docs/search.md "Fourth pass")
    coverage_weight: float = Field(default=0.3, ge=0, le=2)
    abbreviation_rank_weight: float = Field(default=0.2, ge=0, le=2)
    # and (docs/search.md "Sixth pass: conversations"): + date_rank_weight x the best
    # date match of its candidate turns with the dates the query names;
    # + participant_rank_weight when a candidate turn is by a person the query names
    # (0.5 since session 36: 0.2 let other people's conversations into a store's first
    # five; docs/search.md "Session 36")
    date_rank_weight: float = Field(default=0.3, ge=0, le=2)
    participant_rank_weight: float = Field(default=0.5, ge=0, le=2)
    # + perspective_rank_weight x the min-max score of its best first-person turn among
    # the first perspective_depth candidates (bot/search/perspective.py, "Session 35")
    perspective_rank_weight: float = Field(default=0.2, ge=0, le=2)
    perspective_depth: int = Field(default=20, ge=1, le=1000)
    # + title_rank_weight x the part of the query's words the conversation's title holds
    # when the owner gave it (a rename), auto_title_rank_weight when the naming did
    # (bot/search/titles.py); a conversation found by its title alone is listed too
    title_rank_weight: float = Field(default=1.5, ge=0, le=4)
    auto_title_rank_weight: float = Field(default=0.0, ge=0, le=4)
    # the final order of the best ``ranker_depth`` turns: a model learned from the rules'
    # signals (bot/search/learned.py), or the rules' fused score alone
    ranker: Literal["learned", "rules"] = "learned"
    ranker_depth: int = Field(default=60, ge=2, le=1000)
    ranker_model: Path | None = None  # a model file (default: the one shipped)
    # the learned ranker also matches the query's words to the candidates' words by
    # meaning (term vectors; docs/search.md "Fifth pass"): +0.016 turn_recall@10
    # cross-validated, ~3-6 ms a query at 10,000 conversations; the term vectors are
    # built only while it is on (off: the model without these features ranks)
    soft_coverage: bool = True
