"""What ``/status`` answers: the conversation it was typed in, the brain, and for the
owner the daemon's health, as short plain lines that read well on a phone.

Apart from :mod:`bot.commands` (which runs it) to keep that module to the commands
themselves. Every channel gets the same lines; the dashboard also gets them as data
(``statusLines``), the conversation's line as a link to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bot.brain.base import BrainAccessRefused, ForeignAnswer, UtilityModel
from bot.brain.cost import shown_usd
from bot.health_store import STAND_IN_ARGS, STAND_INS
from bot.index import ConversationRecord
from bot.labels import display_title, shown_title
from bot.owner_days import local_moment, owner_zone
from bot.reply_generation import ACCESS_FIXES, ACCESS_PROBLEMS

if TYPE_CHECKING:
    from bot.services import Services

CONVERSATION_PREFIX = "Conversation: "
OFFLINE_REPLIES = "replies are recall-only"  # what the offline brain answers with
OFFLINE_NOTE = f"no API key: {OFFLINE_REPLIES}, no model is asked"


def local_minute(timestamp: str, zone: ZoneInfo) -> str:
    """A stored UTC timestamp as the owner's ``2026-03-01 20:30`` in ``zone`` (the text
    as it is when it is no timestamp)."""
    moment = local_moment(timestamp, zone)
    return timestamp if moment is None else moment.strftime("%Y-%m-%d %H:%M")


def conversation_lines(services: Services, rec: ConversationRecord, title: str) -> list[str]:
    """The lines about conversation ``rec`` shown as ``title``: what it is, its model,
    size, when it started and was last active (the owner's time zone), pinned or not."""
    zone = owner_zone(services.config)
    model = rec.model or services.config.models.default
    turns = f"{rec.turn_count} turn{'' if rec.turn_count == 1 else 's'}"
    parts = [f"Model: {model}", turns]
    if rec.channel != "web":  # (a dashboard conversation is never pinned)
        # Pinned: the chat's (or thread's) next message continues it; /new unpins it.
        parts.append("pinned (new messages here continue it)" if rec.pinned else "not pinned")
    return [
        f"{CONVERSATION_PREFIX}{title}",
        " · ".join(parts),
        f"Started {local_minute(rec.created, zone)}, last active "
        f"{local_minute(rec.updated, zone)} ({zone.key})",
        f"Cost: {shown_usd(rec.cost_total)} ({rec.tokens_in:,} in / {rec.tokens_out:,} out tokens)",
    ]


def brain_line(services: Services, owner: bool = False) -> str:
    """The brain's mode; offline says plainly that no model answers. For the ``owner``,
    why the model cannot be reached when the last call could not (the key refused, an
    outage): before session 40 it read "Brain: anthropic" while every reply waited."""
    brain = services.brain.name
    line = f"Brain: {brain}" + (f" ({OFFLINE_NOTE})" if brain == "offline" else "")
    failing = getattr(services.brain, "failing", None)
    trouble = failing() if owner and failing is not None else None
    if isinstance(trouble, ForeignAnswer):  # not the service's answer (session 41)
        line += (
            f" (refused by something in between, not the model service: HTTP "
            f'{trouble.status}, "{trouble.excerpt}")'
        )
    elif isinstance(trouble, BrainAccessRefused):
        what = ACCESS_PROBLEMS.get(trouble.status, "access refused")
        fix = ACCESS_FIXES.get(trouble.status)
        line += f" (access refused: {trouble.status}, {what}" + (f"; {fix})" if fix else ")")
    elif trouble is not None:
        line += " (unreachable at the last try)"
    return line


def missing_model_ids(services: Services) -> set[str]:
    """The model ids the model service does not offer, as this process learnt them: the
    start's check, ``/model``, a reply's or a note's 404 (until a restart, or until the
    model answers again)."""
    missing = getattr(services.brain, "missing_models", None)
    ids = set(missing()) if missing is not None else set()
    reporter = getattr(services.lifecycle, "missing_models", None)
    errors = getattr(reporter, "errors", None) or {}
    return ids | {error.model_id for error in errors.values()}


def missing_models_line(services: Services) -> str | None:
    """The models the service does not offer, each with the keys naming it and what it
    does to the replies; None when there are none. The start's notice was sent once
    (a day): /status says it for as long as it holds."""
    ids = missing_model_ids(services)
    if not ids:
        return None
    models = services.config.models
    default_id = services.config.resolve_model(models.default)
    said, keyed = [], False
    for model_id in sorted(ids):
        keys = [f"models.aliases.{a}" for a, m in models.aliases.items() if m == model_id]
        if model_id == default_id:
            keys.insert(0, "models.default")
        keyed = keyed or bool(keys)
        # (no key: an alias removed since, still a conversation's choice until its next
        # message switches it to the default)
        named = ", ".join(keys) or "a conversation's model, in no configuration key now"
        said.append(f"{model_id} ({named})")
    fix = "Fix the configuration and restart; " if keyed else ""
    if default_id in ids:
        effect = f"replies on {models.default} are notices until then"
    else:
        effect = f"{models.default} (models.default) answers for them"
        effect += " meanwhile" if keyed else ""
    return f"Models the model service does not offer: {'; '.join(said)}. {fix}{effect}."


def search_line(services: Services) -> str:
    vec = "hybrid (keyword + vectors)" if services.vector_search_available() else "keyword only"
    rebuild = vector_rebuild_state(services)
    if rebuild:
        why = _missing_why(services) if vector_rebuild_running(services) else ""
        vec += f", {rebuild}{why}"
    return f"Search: {vec}"


def _missing_why(services: Services) -> str:
    """Why the vectors a rebuild embeds were missing, as far as this process knows.
    Until session 41 it was always "(a new model, or turns added offline)", also after
    an ordinary restart whose only missing vectors were of turns that came while the
    model loaded: a model change is named only when the start dropped the vectors for
    one (:attr:`bot.vectors.VectorIndex.dropped`)."""
    vectors = services.vectors
    dropped = getattr(vectors, "dropped", None)
    if dropped:
        return f" ({dropped})"
    if getattr(vectors, "progress", None) is None:
        return ""  # a retry of what a failed pass left: its log line says why
    return " (turns written before the model loaded, or while it was unavailable)"


def vector_rebuild_state(services: Services) -> str | None:
    """What the rebuild of the vectors does now, with how far it is (``/status``, the
    status line, so ``my-agent status`` too), or None when none runs. "embedding the
    vectors still missing" alone never said whether it had just begun or nearly ended,
    nor that it waits for the notes owed first."""
    if words_only_rebuild(services):
        return WORDS_ONLY
    if not vector_rebuild_running(services):
        return None
    text = "embedding the vectors still missing"
    progress = getattr(services.vectors, "progress", None)
    if progress is None:  # a retry of what a failed pass left
        return text
    if progress.waiting:
        return f"{text}, after the notes owed"
    if not progress.total:  # counting them
        return text
    return (
        # "done": "260 of 261 conversations" read as the ones left, with three quarters
        # of the windows still to embed (a long conversation last)
        f"{text}: {progress.done} of {progress.total} conversations done, "
        f"{progress.windows} turn windows embedded so far"
    )


# Every turn and note is found by meaning meanwhile: only the ranking's soft coverage
# waits for the word vectors (search.soft_coverage).
WORDS_ONLY = "completing the word vectors of the ranking"


def vector_rebuild_running(services: Services) -> bool:
    """Vectors are being (re)built: after a model change every one was dropped, and
    search answers by keyword and the vectors made so far meanwhile. Only while turn or
    note vectors are missing: the rebuild every start runs to check, and one that only
    completes the word vectors, miss nothing (it said "embedding the vectors still
    missing" for them)."""
    vectors = _searched_vectors(services)
    return vectors is not None and vectors.missing and (vectors.rebuilding or vectors.stale)


def words_only_rebuild(services: Services) -> bool:
    """A rebuild runs that only completes the word vectors (nothing is missing)."""
    vectors = _searched_vectors(services)
    return (
        vectors is not None
        and not vectors.missing
        and vectors.rebuilding
        and vectors.build_terms
        and not vectors.terms_ready
    )


def _searched_vectors(services: Services) -> Any:
    """The vector index when search reads vectors (bot.vectors.VectorIndex), else None."""
    return services.vectors if services.vector_search_available() else None


def _conversations(n: int) -> str:
    return f"{n} conversation{'' if n == 1 else 's'}"


async def notes_line(services: Services) -> str:
    """The notes the lifecycle owes: how many conversations wait for theirs, and of
    those how many the offline stand-in summarises meanwhile (written while the model
    failed, searchable but not the model's), with the oldest one's last activity in the
    owner's time zone. Without a model every note is offline: no stand-in is owed."""
    db = services.index.db
    waiting = await services.index.notes_owed()
    if not waiting:
        return "Notes: up to date"
    line = f"Notes: {_conversations(waiting)} waiting for notes"
    if not isinstance(services.brain, UtilityModel):
        return line
    row = await db.fetchone(STAND_INS, STAND_IN_ARGS)
    stand_ins, oldest = (int(row[0] or 0), row[1]) if row else (0, None)
    if stand_ins:
        line += (
            f"; {stand_ins} of them summarised by the offline stand-in until the model "
            "writes their notes"
        )
        if oldest:
            zone = owner_zone(services.config)
            line += f", the oldest last active {local_minute(str(oldest), zone)} ({zone.key})"
    return line


async def health_lines(services: Services) -> list[str]:
    """The daemon's health: its channels and storage, what waits, and the notes owed."""
    health = services.health()
    channels: dict[str, Any] = health.get("channels") or {}
    up = [name for name, started in channels.items() if started]
    down = [name for name, started in channels.items() if not started]
    parts = [
        f"channels up: {', '.join(up) or 'none'}" + (f" (down: {', '.join(down)})" if down else "")
    ]
    held = int(health.get("spooled") or 0) + int(health.get("repliesWaitingForStorage") or 0)
    parts.append(f"storage failing, {held} held in memory" if held else "storage ok")
    if not health.get("accepting", True):
        parts.append("stopping")
    for name, problems in (health.get("channelProblems") or {}).items():
        parts.extend(f"{name}: {problem}" for problem in problems)
    parts.extend(health.get("unreadableTranscripts") or [])
    if health.get("indexDamage"):
        parts.append(str(health["indexDamage"]))
    total = await services.index.count()
    pending = await services.outbox.undelivered_count()
    escalations = await services.external.pending_escalation_count()
    return [
        "Daemon: " + "; ".join(parts),
        f"Conversations: {total}; outbox pending: {pending}; escalations pending: {escalations}",
        await notes_line(services),
    ]


PARTY_COSTS_PREFIX = "Known contacts' answers: "


async def party_costs_line(services: Services) -> str | None:
    """What the model's answers to known contacts have cost, all told, as the
    conversation's ``Cost:`` line says it (the dashboard's Analytics shows the same
    sums); None while they have cost nothing. Before session 40 these paid calls were
    counted nowhere: a chatty contact's cost could not be seen."""
    costs = await services.external.answer_costs()
    if not costs.any:
        return None
    who = f"{costs.parties} contact{'' if costs.parties == 1 else 's'}"
    return (
        f"{PARTY_COSTS_PREFIX}{shown_usd(costs.cost)} ({costs.tokens_in:,} in / "
        f"{costs.tokens_out:,} out tokens, {who}, all time)"
    )


async def status_answer(
    services: Services, channel: str, conv: ConversationRecord | None, *, owner_only: bool
) -> tuple[list[str], dict[str, object] | None]:
    """``/status``'s lines typed on ``channel`` in ``conv`` (None: no conversation yet),
    and on the web the conversation's line as a link (None elsewhere). ``owner_only``:
    read by the owner alone (not a group), so the daemon's health is added."""
    lines: list[str] = []
    linked: dict[str, object] | None = None
    fresh = (await services.conversations.get(conv.id) or conv) if conv is not None else None
    if fresh is None:
        lines.append(f"{CONVERSATION_PREFIX}none yet (it starts with your first message)")
    else:
        # Named as the dashboard and `my-agent conversations` name it (an older
        # escalation conversation by its parties as known now, an unnamed mail thread by
        # its sender and subject). The dashboard links it by that name; the other
        # channels add the id, which `my-agent conversations show` takes (the page
        # cannot open an id). Before session 42 they gave the bare title: every unnamed
        # thread was "New conversation".
        shown = await shown_title(services, fresh)
        meta, people = fresh.channel_meta, fresh.participants
        title = display_title(fresh.channel, shown, meta, people)
        if channel == "web":
            linked = {"prefix": CONVERSATION_PREFIX, "conversationId": fresh.id, "title": title}
            lines.extend(conversation_lines(services, fresh, title))
        else:
            lines.extend(conversation_lines(services, fresh, f"{title} ({fresh.id})"))
    lines += [brain_line(services, owner_only), search_line(services)]
    missing = missing_models_line(services) if owner_only else None
    if missing:  # (the configuration is the owner's, not a group's, to read)
        lines.append(missing)
    if owner_only:
        # (In a group every member reads it: how many conversations the owner has and
        # how many strangers wait for an answer are the owner's to know.)
        lines += await health_lines(services)
        # (what answering the owner's contacts costs is the owner's to know, too)
        parties = await party_costs_line(services)
        if parties:
            lines.append(parties)
    return lines, linked
