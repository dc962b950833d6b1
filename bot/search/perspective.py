"""The conversation list's perspective term: who a well-matching turn is about.

A question about someone's life ("What board games has Nate played?", "What are Dave's
dreams?") is answered where a person tells of their own: "We played this game Catan",
"My dream was to open a shop". The conversations that out-rank those in the list match
the same words in turns about the *other* person: encouragement and reactions ("Keep at
it and never forget your dreams!", "That's awesome, Calvin! Your hard work paid off"),
which say "you" and "your" and tell nothing. Neither BM25 nor MiniLM sees the
difference: stop words leave the keyword query, and a sentence vector barely moves with
a pronoun.

So a conversation whose candidate turns near the top of the ranking include one spoken
in the first person (more first-person words than second-person ones) gains
``perspective_rank_weight`` x that turn's score relative to the best turn, min-max
normalised over the conversations among the first ``perspective_depth`` turns. The
words are English; in other languages no turn counts and the term changes nothing. A
query holding an identifier keeps its list as it is (the learned order's rule too).
Measured on LoCoMo (docs/search.md "Session 35"): session_recall@5 0.9071 -> 0.9162,
the weight chosen inside the training folds (leave one conversation out) the same in
all six; the turn ranking is untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.config.model import SearchConfig
from bot.search.learned import has_identifier
from bot.search.query import first_person

if TYPE_CHECKING:
    from bot.search.fusion import Scored


def perspective(cfg: SearchConfig, scored: Scored) -> dict[str, float]:
    """conversation -> its perspective term (module docstring), from the first
    ``perspective_depth`` ranked candidate turns of ``scored``; conversations without
    one there are left out (0)."""
    weight = cfg.perspective_rank_weight
    order = scored.order.tolist()[: cfg.perspective_depth]
    # A query holding an identifier ("QX-55821") asks for that string, not for someone's
    # life: the conversation that holds it stays first, as in the learned order.
    if not weight or not order or has_identifier(scored.query):
        return {}
    rows, final = scored.rows, scored.final
    best = float(final[order[0]]) or 1.0
    values: dict[str, float] = {}
    for i in order:
        conv = rows.conv[i]
        value = float(final[i]) / best if first_person(rows.content[i]) else 0.0
        if value > values.get(conv, -1.0):
            values[conv] = value
    low, high = min(values.values()), max(values.values())
    if high <= low:  # all alike: those with such a turn above the rest
        return dict.fromkeys(values, weight) if high > 0 else {}
    return {conv: weight * (v - low) / (high - low) for conv, v in values.items() if v > low}
