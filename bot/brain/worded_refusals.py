"""A model's refusal written as text, and the header an answer may open with.

Models usually refuse in words ("I'm sorry, but I can't help with summarizing this
conversation."), with ``stop_reason`` ``end_turn``, not ``refusal``. The one-shot answers
that stand in for a conversation for good, its meeting notes (bot.lifecycle.abbreviation)
and its compression summary (bot.brain.compression), must not be such an answer: stored,
it replaced what it was asked to sum up with an apology. Notes and summaries are about the
conversation, in the third person: they never open with an apology or an "I can't".
"""

from __future__ import annotations

import re

# A refusal in words rather than by stop_reason: short, and opening with an apology or an
# "I can't". (Not followed by a letter: with "\b" there, "Sorry, I can't" was no refusal,
# a comma and a space being no word boundary; before session 40.)
REFUSAL = re.compile(
    r"(i'?m sorry|i am sorry|sorry,|i apologi[sz]e|unfortunately,? i|"
    r"i (?:can(?:not|'t| not)|won'?t|am unable|'m unable|am not able|'m not able))(?!\w)",
    re.IGNORECASE,
)
REFUSAL_CHARS = 400
# "Meeting notes:" / "**Summary:**" / "Here are the meeting notes for this conversation:"
# headers some answers start with, and such a Markdown heading ("# Meeting Notes"): kept,
# they were shown in the dashboard and embedded as part of the notes (session 29).
PREAMBLE = re.compile(
    # ("Sure! Here are the notes you asked for:" stayed whole before session 39)
    r"^\s*((sure|certainly|of course|okay|ok)[!,.]?\s+)?"
    r"(\*\*)?(here (is|are) (the |my |a )?)?(concise |brief |short )?"
    r"(meeting notes|notes|summary|abbreviation)( you asked for| you requested)?"
    r"( (for|of|on) (this|the) (conversation|chat|discussion))?\s*:\s*(\*\*)?\s*"
    r"|^\s*#{1,6} (meeting notes|notes|summary)\b[^\n]{0,40}\n\s*(?=\S)",
    re.I,
)


def without_preamble(text: str) -> str:
    """``text`` without a header such as "Here is the summary:" at its start, stripped."""
    return PREAMBLE.sub("", text, count=1).strip()


def refused_in_words(text: str) -> bool:
    """Whether ``text`` (its header, if any, aside) is a refusal written as text: short
    (at most :data:`REFUSAL_CHARS` characters) and opening with an apology or an "I
    can't"."""
    answer = without_preamble(text)
    return bool(REFUSAL.match(answer)) and len(answer) <= REFUSAL_CHARS


__all__ = ["PREAMBLE", "REFUSAL", "REFUSAL_CHARS", "refused_in_words", "without_preamble"]
