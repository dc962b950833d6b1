"""The typed configuration tree. Every key is documented in ``config.example.yaml``.

Its sections are here but for the channels' (:mod:`bot.config.channels`) and recall's,
the embedding model and hybrid search (:mod:`bot.config.recall`); all are importable
from here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, PrivateAttr, field_validator

from bot.config.channels import ChannelsConfig, OptionalText, OptionalUrl, _Section
from bot.config.recall import EmbeddingConfig, SearchConfig

Tier = Literal["known", "untrusted", "blocked"]


def _id_text(value: object) -> object:
    """A whole number (a Telegram user id written unquoted in YAML) as its text."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class OwnerConfig(_Section):
    name: str = "Owner"
    timezone: str = "UTC"
    # channel -> identities (Telegram numeric ids and @usernames, e-mail addresses)
    identities: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("identities", mode="before")
    @classmethod
    def _numeric_ids(cls, value: object) -> object:
        """``telegram: [123456789]``, the natural way to write a numeric id, was refused
        ("Input should be a valid string") unless quoted: a whole number is its text."""
        if not isinstance(value, dict):
            return value
        return {
            channel: [_id_text(i) for i in ids] if isinstance(ids, list) else ids
            for channel, ids in value.items()
        }

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value


class PriceConfig(_Section):
    """USD per million tokens. Prompt caching's writes and reads default to the API's
    published multiples of ``input`` (1.25 for a 5-minute cache write, 0.1 for a read)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)


def _default_prices() -> dict[str, PriceConfig]:
    return {
        "opus": PriceConfig(input=5.0, output=25.0),
        "sonnet": PriceConfig(input=3.0, output=15.0),
        "haiku": PriceConfig(input=1.0, output=5.0),
    }


def default_aliases() -> dict[str, str]:
    """The model ids the default aliases (and so the default prices) stand for."""
    return {
        "opus": "claude-opus-4-8",
        "sonnet": "claude-sonnet-4-6",
        "haiku": "claude-haiku-4-5",
    }


class ModelsConfig(_Section):
    default: str = "sonnet"
    aliases: dict[str, str] = Field(default_factory=default_aliases)
    # Prices per alias or per real model id (bot.brain.cost.price_for: an id's price
    # first, then the alias's, then another alias's of the same model).
    prices: dict[str, PriceConfig] = Field(default_factory=_default_prices)

    @field_validator("prices")
    @classmethod
    def _over_the_defaults(cls, prices: dict[str, PriceConfig]) -> dict[str, PriceConfig]:
        """The prices given, over the default ones: a file that set sonnet's alone
        replaced the whole table, and every haiku call (notes, titles, compression) cost
        nothing in /status from then on (before session 39)."""
        return {**_default_prices(), **prices}


# The smallest extended-thinking budget the Messages API accepts.
MIN_THINKING_BUDGET = 1024


class BrainConfig(_Section):
    provider: Literal["anthropic", "offline"] | None = None  # None: anthropic iff a key exists
    base_url: OptionalUrl = None
    api_key: OptionalText = None  # normally ANTHROPIC_API_KEY
    max_tokens: int = Field(default=2048, ge=1)
    request_timeout: float = Field(default=120.0, gt=0)
    # Seconds one reply's streamed calls may take in all (its tool rounds and retries
    # too), however steadily a server trickles (bot/brain/anthropic_api.py): past it
    # the reply ends with what was said, marked as cut off. Before session 41 nothing
    # bounded a stream that never stalled, and it held the conversation for ever.
    reply_timeout: float = Field(default=600.0, ge=1, le=86400)
    retry_budget_seconds: float = Field(default=60.0, ge=0)
    pending_retry_interval: float = Field(default=30.0, gt=0)
    # Backoff between retries: full jitter over base * 2**attempt, capped (seconds).
    retry_base_delay: float = Field(default=0.5, gt=0)
    retry_max_delay: float = Field(default=8.0, gt=0)
    max_tool_iterations: int = Field(default=6, ge=1)
    # Tool calls run from one model response; the rest get an error result
    # (bot/brain/tool_round.py): 50 tool_use blocks ran 50 searches.
    max_tool_calls_per_response: int = Field(default=8, ge=1)
    # Replies generated at once across conversations (API rate limits; under a burst,
    # storing what arrives goes first and replies follow).
    max_concurrent_replies: int = Field(default=8, ge=1)
    # While messages arrive without a pause of 20 ms (a flood), replies to others than
    # the owner wait up to this many seconds so that storing what arrives goes first
    # (bot/arrivals.py); 0: never wait.
    flood_reply_wait_seconds: float = Field(default=10.0, ge=0, le=300)
    working_context_turns: int = Field(default=20, ge=1)
    working_context_tokens: int = Field(default=8000, ge=100)
    compression_budget_tokens: int = Field(default=24000, ge=500)
    restricted_context_tokens: int = Field(default=2000, ge=100)
    thinking_budget_tokens: int = Field(default=0, ge=0)  # 0 disables extended thinking
    # cache_control breakpoints on the owner's replies (bot/brain/prompt_cache.py): a tool
    # round and the next message read the prompt so far at a tenth of the input price
    prompt_cache: bool = True
    persona_file: str = "persona.md"  # relative to data_dir
    # channel -> seconds: the owner's messages arriving within this of each other get one
    # reply (a long paste the phone splits in two, three quick lines); 0 or absent: off
    debounce_seconds: dict[str, Annotated[float, Field(ge=0, le=30)]] = Field(
        default_factory=lambda: {"telegram": 1.5}
    )

    @field_validator("thinking_budget_tokens")
    @classmethod
    def _thinking_budget(cls, value: int) -> int:
        # The API refuses a smaller budget (400): every reply was "rejected the request".
        if 0 < value < MIN_THINKING_BUDGET:
            raise ValueError(f"must be 0 (off) or at least {MIN_THINKING_BUDGET}")
        return value


# A timer further off than this is a date past year 9999: 1e12 passed check-config, then
# every message logged an OverflowError and no conversation got its notes.
_YEAR_SECONDS = 365 * 24 * 3600.0


class TrustConfig(_Section):
    default_tier: Tier = "untrusted"
    # channel -> identity -> tier
    contacts: dict[str, dict[str, Tier]] = Field(default_factory=dict)

    @field_validator("contacts", mode="before")
    @classmethod
    def _numeric_ids(cls, value: object) -> object:
        """``telegram: {123456789: known}``: a YAML key of digits is a number (refused
        as "Input should be a valid string"); a whole number is its text."""
        if not isinstance(value, dict):
            return value
        return {
            channel: {_id_text(k): v for k, v in ids.items()} if isinstance(ids, dict) else ids
            for channel, ids in value.items()
        }

    acknowledgement: str | None = (
        "Thanks for your message. It has been passed on and you will hear back if a reply is "
        "needed."
    )  # null: stay silent
    escalation_channel: str | None = None  # None: the first enabled of telegram, email, web
    # Bounded like the timers (_YEAR_SECONDS): 1e12 passed check-config, then a
    # stranger's command raised OverflowError ("date value out of range") in the router.
    escalation_interval_seconds: float = Field(default=3600.0, ge=0, le=_YEAR_SECONDS)
    # All parties together: escalations passed to the owner's chat in any hour. A
    # stranger with a new address per message escalated each time (the limit above is
    # per party); past this they are recorded and listed (dashboard, /status), not sent.
    escalations_per_hour: int = Field(default=20, ge=1)
    # The model's answers to known contacts in any hour: per contact and all together
    # (each is a paid model call; a chatty or compromised contact ran up the bill). Past
    # either, their messages are recorded, not answered, and the owner is told once.
    known_replies_per_hour: int = Field(default=40, ge=1)
    known_replies_per_hour_total: int = Field(default=120, ge=1)
    # The model's answers to the members of one allow-listed group (not the owner's own
    # messages there) in any hour: per group, since anyone can join a group or come back
    # under a new account. Past it, members' messages are recorded, not answered.
    group_replies_per_hour: int = Field(default=40, ge=1)
    # ...and to the members of all groups together: ten allowed groups were ten budgets
    # (400 paid calls an hour) strangers could spend. 120, like known contacts' total:
    # three groups at their full budget; an owner with more busy groups raises it.
    group_replies_per_hour_total: int = Field(default=120, ge=1)
    # What a third party's message keeps (their file; the index keeps 8,000 characters of
    # it): longer is cut, with a line saying how much was not kept. A stranger's
    # megabytes were stored whole, and a flood of them filled the disk.
    party_message_max_chars: int = Field(default=50_000, ge=1000)
    # An untrusted party's messages in any hour (and all untrusted parties' together)
    # past which each keeps only its first 500 characters: a flood cannot fill the disk.
    untrusted_messages_per_hour: int = Field(default=30, ge=1)
    untrusted_messages_per_hour_total: int = Field(default=300, ge=1)
    known_scope: str = (
        "You may answer general questions politely. You do not share anything about the "
        "owner, their schedule, contacts or conversations."
    )


class TranscriptConfig(_Section):
    fsync: Literal["always", "never"] = "always"
    # how often the journal's transcripts are fsynced and the journal dropped (bot.journal)
    checkpoint_seconds: float = Field(default=1.0, gt=0, le=60)


class ConversationsConfig(_Section):
    idle_timeout_seconds: float = Field(default=600.0, gt=0, le=_YEAR_SECONDS)
    abbreviation_sweep_seconds: float = Field(default=300.0, gt=0, le=_YEAR_SECONDS)
    naming_turn: int = Field(default=5, ge=1)
    renaming_interval_turns: int = Field(default=10, ge=1)
    list_active_minutes: int = Field(default=60, ge=1)
    # Background model calls (lifecycle): model aliases and budgets.
    abbreviation_model: str = "haiku"
    naming_model: str = "haiku"
    abbreviation_max_tokens: int = Field(default=400, ge=50)
    # Characters of transcript sent for one abbreviation; a longer conversation sends its
    # previous notes plus its most recent turns. English characters: other scripts count
    # four per estimated token (a Chinese character is about one token).
    abbreviation_input_chars: int = Field(default=48000, ge=1000)
    naming_context_turns: int = Field(default=20, ge=1)  # last N turn numbers read


class ServiceConfig(_Section):
    """Process lifecycle under systemd (or any supervisor)."""

    # SIGTERM: replies still running after this are left pending (answered after the
    # restart); the unit's TimeoutStopSec must stay above it.
    drain_seconds: float = Field(default=20.0, ge=0.5, le=300)


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class AppConfig(_Section):
    data_dir: Path = Path(".my_agent")
    owner: OwnerConfig = Field(default_factory=OwnerConfig)
    brain: BrainConfig = Field(default_factory=BrainConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    trust: TrustConfig = Field(default_factory=TrustConfig)
    transcripts: TranscriptConfig = Field(default_factory=TranscriptConfig)
    conversations: ConversationsConfig = Field(default_factory=ConversationsConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # Set by bot.config.build_config: the secrets the file itself held.
    _secrets_in_file: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("data_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        # "" is Path("."): an empty value (a template variable left unset) made the
        # current directory the data directory, and the daemon chmods that to 0700.
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty (write . for the current directory)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _home_expanded(cls, value: Path) -> Path:
        # Before session 41, "~/agent-data" (in the file, or MY_AGENT_DATA_DIR=~/x from the
        # systemd EnvironmentFile, which systemd does not expand) meant a folder named "~"
        # under the current directory; embedding.cache_dir and model_path were expanded.
        expanded = Path(os.path.expanduser(value))  # unchanged when no home is known
        if str(expanded).startswith("~"):
            raise ValueError(f"cannot expand {str(value)!r} (no such home): write the full path")
        return expanded

    # -- derived paths -------------------------------------------------------------
    @property
    def conversations_dir(self) -> Path:
        return self.data_dir / "conversations"

    @property
    def external_dir(self) -> Path:
        return self.data_dir / "external"

    @property
    def index_path(self) -> Path:
        return self.conversations_dir / "conversations.db"

    @property
    def state_path(self) -> Path:
        return self.data_dir / "state.db"

    @property
    def model_cache_dir(self) -> Path:
        """Where downloaded embedding models are kept (``embedding.cache_dir``)."""
        if self.embedding.cache_dir:
            return Path(self.embedding.cache_dir).expanduser()
        return self.data_dir / "models"

    def secrets_in_file(self) -> tuple[str, ...]:
        """Dotted keys of the secrets written in the config file rather than given by
        the environment (``check-config`` and ``run`` warn about them)."""
        return self._secrets_in_file

    def resolve_model(self, alias: str | None) -> str:
        """Real model id for an alias (or an id given directly)."""
        name = alias or self.models.default
        return self.models.aliases.get(name, name)

    def brain_provider(self) -> Literal["anthropic", "offline"]:
        if self.brain.provider is not None:
            return self.brain.provider
        return "anthropic" if self.brain.api_key else "offline"

    def escalation_channel(self) -> str:
        if self.trust.escalation_channel:
            return self.trust.escalation_channel
        for name in ("telegram", "email"):
            if getattr(self.channels, name).enabled:
                return name
        return "web"
