"""The working context (seed 000 "Working Context", "Compression").

The working context is what the model sees of the current conversation: the latest
compression summary plus the turns after it. It is never stored; it is rebuilt from the
transcript on every reply, with one piece of in-memory state per conversation, the
*session start* (the first turn number in context):

- **Hydration** (first reply since start-up): every turn after the summary's
  ``compressedThrough``, as the context held them before the restart, when they fit in
  ``brain.compression_budget_tokens``; else (seed 000's rule) the last
  ``brain.working_context_turns`` turns or ``brain.working_context_tokens`` tokens,
  whichever is smaller, and the turns before them, in no summary yet, are summarised at
  once (:attr:`WorkingContext.unsummarised`, bot.brain.compression).
- **Growth**: later replies keep the start, so the context grows turn by turn.
- **Compression**: when the context passes ``brain.compression_budget_tokens`` the brain
  summarises everything before a recent window (see :meth:`WorkingContexts.plan`), appends
  a ``compression`` event, and moves the start to the window (:meth:`moved`). After a
  restart, hydration finds the same summary and the same turns after it.

Token counts are estimates (:mod:`bot.brain.tokens`): compression needs a stable, cheap
measure, not the tokenizer's exact count. The summarising call's prompts are
:mod:`bot.brain.summary_prompt`; a known party's messages :mod:`bot.brain.restricted_context`;
how a group's lines are labelled :mod:`bot.brain.group_lines`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from zoneinfo import ZoneInfo

from bot.brain.group_lines import OWNER_MARK as OWNER_MARK  # re-exported (split out)
from bot.brain.group_lines import group_line as group_line
from bot.brain.group_lines import member_name
from bot.brain.late_turns import late_label
from bot.brain.others_words import (
    escalation_text,
    with_escalations,
    with_forward,
    with_quote,
)
from bot.brain.restricted_context import EMPTY_MESSAGE
from bot.brain.restricted_context import (  # re-exported: a party's messages, built apart
    restricted_messages as restricted_messages,
)
from bot.brain.tokens import cut_to_tokens, estimate_tokens, tail_to_tokens
from bot.transcript_lines import membership_notice

MESSAGE_OVERHEAD_TOKENS = 4  # role and framing per message
# A message cut in the context keeps its start and, in this share of what is kept, its end.
TAIL_SHARE = 3
# An earlier reply the API refused (stop_reason "refusal"), as the model sees it: the
# API's documentation says the refused turn must be removed or changed before going on,
# or the requests after it are refused too (the transcript keeps what was said).
REFUSED_IN_CONTEXT = "(an earlier answer here was stopped by the model service; not shown)"
# An earlier reply of the offline brain (no model configured then), as the model sees it:
# before session 40 its listing went to the model verbatim as the model's own answer
# (the offline label, "Set ANTHROPIC_API_KEY", other conversations' snippets), once a key
# was set. The transcript keeps the listing.
OFFLINE_IN_CONTEXT = "(no model answered this; the offline brain listed recall results)"


@dataclass(frozen=True)
class ContextTurn:
    role: str  # "user" | "assistant"
    content: str
    turn_number: int
    # a group member's message (not the owner's): its sender; ``content`` starts with
    # the label that says so (see transcript_turns)
    member: str | None = None
    # a member's join or leave notice (bot.transcript_lines.membership_notice): shown,
    # not counted among the turns a window holds (window_start)
    notice: bool = False
    # the turn's own text, when ``content`` shows more beside it: others' words (a quoted
    # mail the conversation never held, escalations before it: bot.brain.others_words),
    # when it was written if it came late (bot.brain.late_turns)
    said: str | None = None
    # whether those are others' words (the system prompt then says what they are)
    others: bool = False
    # characters of ``content`` that are not the stored message's (a label, when it was
    # written, others' words): where a cut's note says to read on (fromChar) is counted
    # in the stored message, which fetch_context reads
    extra: int = 0

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.content) + MESSAGE_OVERHEAD_TOKENS

    def capped(self, max_tokens: int | None, conv_id: str | None = None) -> ContextTurn:
        """This turn with its content cut to ``max_tokens``: its start and its end, with a
        note between them saying how much is not shown and, given the conversation's id
        ``conv_id``, how to read it (``fetch_context`` of this turn alone, from the
        character the cut starts at). The end too: a pasted log says what went wrong in
        its last lines, and a cut that kept only the start never showed them."""
        if not max_tokens or estimate_tokens(self.content) <= max_tokens:
            return self
        head = cut_to_tokens(self.content, max_tokens - max_tokens // TAIL_SHARE)
        tail = tail_to_tokens(self.content[len(head) :], max_tokens // TAIL_SHARE)
        rest = len(self.content) - len(head) - len(tail)
        how = ""
        if conv_id is not None:
            # Counted in the stored message, less what the context adds to it (a label
            # before it: exact; others' words after it: read again, never skipped).
            # Before session 40 nothing said how, and fetch_context read a turn's first
            # 40,000 characters only: the middle of a longer paste was out of reach.
            n = self.turn_number
            how = (
                f"; read them with fetch_context (conversationId {conv_id}, turnRange from "
                f"{n} to {n}, fromChar {max(0, len(head) - self.extra)})"
            )
        note = (
            f"\n[... {rest} more characters not shown here: longer than the working context "
            f"allows{how} ...]\n"
        )
        return replace(self, content=head + note + tail)


@dataclass
class WorkingContext:
    """Summary plus turns, ready to become Messages API ``messages``."""

    summary: str | None
    compressed_through: int
    turns: list[ContextTurn] = field(default_factory=list)
    # turns after the summary and before ``turns``: a hydration over the budget left them
    # out, and no summary covers them yet (the brain summarises them at once)
    unsummarised: int = 0

    @property
    def shows_others(self) -> bool:
        """Whether a turn shows others' words beside the owner's (the system prompt
        then says what they are: bot.brain.prompt)."""
        return any(t.others for t in self.turns)

    @property
    def start_turn(self) -> int:
        return self.turns[0].turn_number if self.turns else self.compressed_through + 1

    def tokens(self) -> int:
        """Estimated tokens of the summary and the turns."""
        summary = estimate_tokens(self.summary) if self.summary else 0
        return summary + self.turn_tokens()

    def turn_tokens(self) -> int:
        """Estimated tokens of the turns alone (the summary goes into the system prompt,
        which is counted on its own)."""
        return sum(t.tokens for t in self.turns)

    def messages(self) -> list[dict[str, Any]]:
        """Alternating user/assistant messages, starting with the user.

        Empty messages become :data:`EMPTY_MESSAGE`. Consecutive messages of one role (a
        user who wrote twice while a reply was pending) are joined; an assistant message
        with no user message before it (the window cut a turn in half) is dropped, since
        the API needs the user to go first.
        """
        out: list[dict[str, Any]] = []
        for turn in self.turns:
            # The API refuses empty text; an attachment-only message still took a turn.
            content = turn.content if turn.content.strip() else EMPTY_MESSAGE
            if out and out[-1]["role"] == turn.role:
                out[-1]["content"] += "\n\n" + content
            elif out or turn.role == "user":
                out.append({"role": turn.role, "content": content})
        return out


def latest_compression(lines: Iterable[Mapping[str, Any]]) -> tuple[int, str | None]:
    """(compressedThrough, summary) of the last compression event, or (0, None)."""
    through, summary = 0, None
    for line in lines:
        if line.get("type") == "event" and line.get("event") == "compression":
            value = line.get("compressedThrough")
            text = line.get("summary")
            if isinstance(value, int) and isinstance(text, str):
                through, summary = value, text
    return through, summary


def transcript_turns(
    lines: Iterable[Mapping[str, Any]], zone: ZoneInfo | None = None
) -> list[ContextTurn]:
    """The user/assistant turns of a transcript, in order.

    In a group, a message from another member (``fromOwner: false``) is labelled with its
    sender: unlabelled, it read as the owner's own words in the owner's context, where
    the recall tools are, so a member could ask for the owner's data in the owner's name.
    The owner's own there (``fromOwner: true``, decided by account) carry
    :data:`OWNER_MARK`, and a member's text imitating it is flagged (:func:`unmarked`):
    otherwise a member's message of two paragraphs, joined to the next turn as the API
    wants, had a second one that read like the owner's unlabelled words.
    A reply the API refused (``stopReason: "refusal"``) becomes :data:`REFUSED_IN_CONTEXT`,
    and one of the offline brain (``model: "offline"``) :data:`OFFLINE_IN_CONTEXT`.
    A user turn shows the quoted mail and the forwarded one its metadata keeps, and the
    escalations written since the previous user turn, labelled as others' words
    (:mod:`bot.brain.others_words`); one written long before it came, when (in ``zone``,
    UTC by default: :mod:`bot.brain.late_turns`).
    """
    zone = zone or ZoneInfo("UTC")
    out = []
    escalations: list[str] = []
    for line in lines:
        if (escalated := escalation_text(line)) is not None:
            escalations.append(escalated)
            continue
        if line.get("type") != "turn":
            continue
        role, content, number = line.get("role"), line.get("content"), line.get("turnNumber")
        if role in ("user", "assistant") and isinstance(content, str) and isinstance(number, int):
            who = member_name(line) if role == "user" and line.get("fromOwner") is False else None
            text = content
            said = content = group_line(line, text)
            if role == "assistant" and line.get("stopReason") == "refusal":
                said = content = REFUSED_IN_CONTEXT
            elif role == "assistant" and line.get("model") == "offline":
                said = content = OFFLINE_IN_CONTEXT
            others = False
            if role == "user":
                # (in a group after whose it is: the owner's lines start with their mark)
                content = group_line(line, text, late_label(line, zone))
                shown = with_escalations(escalations, with_forward(line, with_quote(line, content)))
                others, content = shown != content, shown
                escalations = []
            out.append(
                ContextTurn(
                    role,
                    content,
                    number,
                    who,
                    membership_notice(line),
                    said if content != said else None,
                    others,
                    extra=max(0, len(content) - len(line["content"])),
                )
            )
    return out


def _said(turn: ContextTurn) -> str:
    return turn.content if turn.said is None else turn.said


def window_start(turns: Sequence[ContextTurn], max_turns: int, max_tokens: int) -> int:
    """First turn number of the tail window: at most ``max_turns`` turn numbers said
    (a group's join and leave notices take tokens, not turns: before session 31 thirty
    people added at once left a hydrated group context nothing said) and
    ``max_tokens`` tokens, whichever is smaller, but always the last turn number."""
    if not turns:
        return 1
    kept: list[int] = []
    said = 0
    tokens = 0
    i = len(turns) - 1
    while i >= 0:
        number = turns[i].turn_number
        group = 0
        notices = True
        j = i
        while j >= 0 and turns[j].turn_number == number:
            group += turns[j].tokens
            notices = notices and turns[j].notice
            j -= 1
        if kept and (said >= max_turns or tokens + group > max_tokens):
            break
        kept.append(number)
        said += not notices
        tokens += group
        i = j
    return kept[-1]
