"""The Brain protocol: what the router asks of a language model (or its offline stand-in)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Profile = Literal["owner", "restricted"]
DeltaSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class HistoryTurn:
    """A prior message given to the brain explicitly (restricted profile only)."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class BrainRequest:
    """One reply to produce.

    ``profile="owner"``: the brain hydrates its working context from the conversation's
    transcript (``conversation_id``) and may use the recall tools. ``profile="restricted"``
    (a ``known`` third party): no conversation, no recall tools, no owner data; the only
    history is ``history`` and the only instructions about the owner are ``scope``.
    """

    profile: Profile
    channel: str
    text: str
    model_alias: str
    conversation_id: str | None = None
    turn_number: int | None = None
    party_name: str | None = None
    scope: str | None = None
    history: Sequence[HistoryTurn] = ()
    # A hint for the brain to mention naturally (e.g. the conversation could be split).
    notes: Sequence[str] = ()
    # Who besides the party reads the reply (``profile="restricted"``: a reply-all mail's
    # other recipients, as the channel found them): the prompt names them.
    readers: Sequence[str] = ()
    # The one conversation recall may read (the owner's profile only): a group's own,
    # whose members read the reply; None: every conversation (the owner's own chats).
    recall_scope: str | None = None
    # What the model calls of this request have cost so far, kept up to date by the brain
    # as each call completes (and for a call cut short): a reply that is stopped has no
    # BrainReply of the brain's, but its tokens were spent (bot.replies).
    spend: Spend | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Usage:
    """Tokens of model calls. ``input`` is the input read at the full price; prompt
    caching bills what it writes to the cache (``cache_write``) and what it reads from
    it (``cache_read``) apart, at other prices (the API's ``cache_creation_input_tokens``
    and ``cache_read_input_tokens``, which its ``input_tokens`` does not include)."""

    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_write + other.cache_write,
            self.cache_read + other.cache_read,
        )

    @property
    def all_input(self) -> int:
        """Every input token, whatever its price."""
        return self.input + self.cache_write + self.cache_read


@dataclass
class Spend:
    """Usage and cost accumulated across the model calls of one request."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None

    def add(self, usage: Usage, cost: float | None) -> None:
        self.usage = self.usage + usage
        if cost is not None:
            self.cost = round((self.cost or 0.0) + cost, 8)

    @property
    def any(self) -> bool:
        return bool(self.usage.all_input or self.usage.output or self.cost)


@dataclass(frozen=True)
class BrainReply:
    text: str
    model: str
    usage: Usage | None = None
    cost: float | None = None
    thinking_text: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


class RequestRefused(Exception):
    """The model refused this one request (HTTP 400-class: the prompt itself), and would
    the same way again: no outage, nothing to wait for."""


# The longest anything waiting for the model honours a ``retry-after`` (a waiting reply,
# the notes and titles): a proxy's "a day" is not obeyed.
RETRY_AFTER_CAP = 900.0


class BrainUnavailable(Exception):
    """The model could not be reached within the retry budget; retry the reply later.

    The router keeps the user turn, tells the user once, and produces the reply when
    the brain is back (the pending-reply marker is the unanswered user turn itself).
    ``retry_after``: the seconds the API asked us to wait (a 429's ``retry-after``
    beyond the retry budget), which the waiting reply honours (at most
    :data:`RETRY_AFTER_CAP`).
    """

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelNotFound(BrainUnavailable):
    """The model service does not offer the model an alias names (HTTP 404
    ``not_found_error``: a retired id, a typo in ``models.aliases``): no outage, and
    asking again cannot help until the configuration is fixed (a one-shot ``complete``
    raises it; the background work it serves tells the owner, bot.lifecycle)."""

    def __init__(self, alias: str, model_id: str, message: str) -> None:
        super().__init__(f"model {alias} ({model_id}) not found: {message}")
        self.alias = alias
        self.model_id = model_id
        self.detail = message


class BrainAccessRefused(BrainUnavailable):
    """The model service refuses our access (HTTP 401/402/403: the key, billing or
    permissions): an outage only the owner can end, so the owner is told which."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ForeignAnswer(BrainUnavailable):
    """Something between us and the model service (a proxy, a firewall) refused the
    request with ``status`` (401/402/403) and a page that is not the API's own error
    (``excerpt``: a short plain one, bot.brain.foreign_answers): not the key or the
    account, so the owner is told what answered instead (before session 41, "permission
    denied" as if the API had said it). Waited out like an outage."""

    def __init__(self, status: int, excerpt: str) -> None:
        super().__init__(
            f"a non-API answer refused the request (HTTP {status}, not the model "
            f'service\'s own error: "{excerpt}")'
        )
        self.status = status
        self.excerpt = excerpt


@runtime_checkable
class Brain(Protocol):
    name: str  # "offline" | "anthropic"
    # Whether restricted replies read ``BrainRequest.history`` (a group's recent
    # messages): the offline brain answers with a fixed notice and skips the lookup.
    uses_history: bool

    async def reply(self, request: BrainRequest, on_delta: DeltaSink | None = None) -> BrainReply:
        """Produce the reply; stream text deltas to ``on_delta`` when given."""

    async def close(self) -> None:
        """Release network resources."""


@runtime_checkable
class UtilityModel(Protocol):
    """A one-shot completion for background work (abbreviation, naming, compression).

    Implemented by the Anthropic brain; the offline brain does not implement it, and
    callers fall back to extractive methods (bot.extractive) when it is absent.
    """

    async def complete(
        self, *, system: str, prompt: str, model_alias: str = "haiku", max_tokens: int = 400
    ) -> str:
        """Return the model's text. Raises BrainUnavailable when the API cannot be reached."""
