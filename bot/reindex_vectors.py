"""``my-agent reindex``'s vectors: what the rebuilt index owes (:func:`owed_vectors`),
left to the daemon, which embeds every missing vector in the background at its start
(:mod:`bot.daemon_vectors`); or, with ``--vectors``, embedded now (:func:`embed_now`),
a progress line on stderr every :data:`PROGRESS_SECONDS`, Ctrl-C keeping what is done.

Before session 41 the reindex embedded them all while it held the store: on a large
store (19,010 conversations) the rows were back in 1-2 minutes and the embedding went on
for 30 more, the daemon kept out (it gave up after 120 s), nothing printed until the
end, and a Ctrl-C then put the old index back, the rebuilt rows thrown away.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the store is imported when a command runs, not by the parser)
    from bot.vector_rebuild import RebuildProgress

PROGRESS_SECONDS = 10.0  # a progress line of ``--vectors`` this often

NO_VECTORS = "vectors not rebuilt here: {why}"
NO_VECTORS_LATER = ": the daemon embeds them at its next start once it has the model"
VECTORS_UNFINISHED = (
    "some conversations' vectors failed to embed (see the log): the daemon retries them"
)


async def owed_vectors(s: Any) -> dict[str, int] | None:
    """The turn windows (``turns``) and notes (``abbreviations``) of the index with no
    vector yet; None when this store has no vectors (``embedding.enabled`` false, or no
    sqlite-vec)."""
    from bot.vector_store import vectors_owed

    if not s.config.embedding.enabled or not s.index_db.vec_available:
        return None
    turns, notes = await s.index_db.run(vectors_owed, write=False)
    return {"turns": turns, "abbreviations": notes}


def no_vectors_warning(s: Any) -> str:
    """Why the vectors cannot be embedded here: the model did not load. (A store with no
    vectors, ``embedding.enabled`` false or no sqlite-vec, owes none: :func:`embed_now`
    does not get this far, and :func:`bot.cli_reindex.rebuild` warns of it.)"""
    reason = getattr(s.search.embedder, "unavailable_reason", None)
    if reason:  # it says what the daemon does, and the key to set
        why = f"the embedding model did not load, {reason}"
    else:
        why = "no local embedding model" + NO_VECTORS_LATER
    return NO_VECTORS.format(why=why)


async def embed_now(s: Any, report: dict[str, Any], out: IO[str] | None = None) -> None:
    """``reindex --vectors``: embed what the rebuilt index owes, saying how far it is on
    ``out`` (stderr) every :data:`PROGRESS_SECONDS`; ``report`` gets ``vectors`` (what was
    embedded, None when nothing could be), ``vectorsOwed`` (what is left),
    ``vectorsSeconds`` and any warning. A cancellation (Ctrl-C) keeps what is embedded,
    says so, and goes on (the daemon embeds the rest)."""
    out = out if out is not None else sys.stderr
    started = time.monotonic()
    if report.get("vectorsOwed") is None:
        return  # this store has none (the report's warning says why)
    if not await s.search.start():
        report["vectors"] = None
        report["warnings"].append(no_vectors_warning(s))
        return
    vectors = s.search.vectors
    print(
        f"embedding {owed_text(report.get('vectorsOwed') or {})} (a line every"
        f" {PROGRESS_SECONDS:g} s; Ctrl-C stops, keeping what is embedded: the daemon"
        " embeds the rest)",
        file=out,
        flush=True,
    )
    watch = _Progress(vectors, out)
    teller = asyncio.create_task(watch.tell(PROGRESS_SECONDS), name="reindex-progress")
    try:
        report["vectors"] = await vectors.reindex_all()
    except asyncio.CancelledError:
        done = watch.seen.windows if watch.seen is not None else None
        print(
            "my-agent reindex: interrupted: the rebuilt index is kept"
            + (f", with the {done} turn windows embedded so far" if done is not None else "")
            + "; the daemon embeds the rest at its start",
            file=out,
            flush=True,
        )
        raise
    finally:
        teller.cancel()
    if getattr(vectors, "stale", False):
        report["warnings"].append(VECTORS_UNFINISHED)
    report["vectorsOwed"] = await owed_vectors(s)
    report["vectorsSeconds"] = round(time.monotonic() - started, 2)


class _Progress:
    """The progress lines of :func:`embed_now`; ``seen``: the rebuild's progress, once
    it has started (what a Ctrl-C reports as embedded)."""

    def __init__(self, vectors: Any, out: IO[str]) -> None:
        self.vectors = vectors
        self.out = out
        self.seen: RebuildProgress | None = None

    async def tell(self, every: float) -> None:
        while True:
            self._look()
            await asyncio.sleep(every)
            self._look()
            if self.seen is not None:
                p = self.seen
                print(
                    f"embedding: {p.done} of {p.total} conversations, {p.windows} turn"
                    " windows so far",
                    file=self.out,
                    flush=True,
                )

    def _look(self) -> None:
        progress = self.vectors.progress
        if progress is not None:
            self.seen = progress


def counted(count: int, one: str, many: str = "") -> str:
    """``1 turn window``, ``2 turn windows`` (``many``: an irregular plural)."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def owed_text(owed: dict[str, int]) -> str:
    """``N turn windows and M notes`` (the notes left out when there are none)."""
    notes = int(owed.get("abbreviations", 0))
    return counted(int(owed.get("turns", 0)), "turn window") + (
        f" and {counted(notes, 'note')}" if notes else ""
    )


def owed_line(report: dict[str, Any], embedding_now: bool = False) -> str | None:
    """The report's line on the vectors the rebuilt index owes, None when none are;
    ``embedding_now``: ``--vectors`` embeds them next."""
    owed = report.get("vectorsOwed")
    if not owed or not (owed.get("turns") or owed.get("abbreviations")):
        return None
    what = owed_text(owed)
    if embedding_now:
        return f"  vectors: {what} to embed: embedding them now (progress on stderr)"
    if report.get("vectors") is not None:  # --vectors, partly failed
        return f"  vectors: {what} still to embed: the daemon embeds them at its start"
    return (
        f"  vectors: {what} to embed: the daemon embeds them in the background at its"
        " start (search by keyword works meanwhile, by meaning fills in);"
        " `my-agent reindex --vectors` embeds them now"
    )


def kept_line(report: dict[str, Any]) -> str | None:
    """The report's line on the vectors kept from the old index (session 42), None when
    none were (:mod:`bot.reindex_carry`)."""
    kept = report.get("vectorsKept")
    if not kept or not (kept.get("turns") or kept.get("abbreviations")):
        return None
    notes = int(kept.get("abbreviations", 0))
    return (
        f"  vectors: {counted(int(kept.get('turns', 0)), 'turn window')}"
        + (f" and {counted(notes, 'note')}" if notes else "")
        + " kept from the old index (the same model, the same text)"
    )


def vectors_line(report: dict[str, Any]) -> str | None:
    """The report's line on the vectors ``--vectors`` embedded, None without it."""
    vectors = report.get("vectors")
    if vectors is None:
        return None
    return (
        f"  vectors: {counted(int(vectors.get('turns', 0)), 'turn window')}, "
        f"{counted(int(vectors.get('abbreviations', 0)), 'abbreviation')}, "
        f"{counted(int(vectors.get('terms', 0)), 'word')} embedded in "
        f"{float(report.get('vectorsSeconds', 0)):.1f} s"
    )
