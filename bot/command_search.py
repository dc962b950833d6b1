"""``/search``: the owner's search from any channel (the engine of ``my-agent search`` and
the recall tool, :class:`bot.search.SearchService`), with its filters typed as words:
``channel:telegram``, ``from:2026-02-01``, ``to:2026-02-28`` (days of the owner's calendar,
the whole day when no time is given)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.command_syntax import CommandResult
from bot.events import InboundMessage
from bot.graphemes import cut, isolate, shorten
from bot.index import ConversationRecord
from bot.labels import UNTITLED, display_title, shown_title
from bot.owner_days import day_range, local_day, owner_zone
from bot.search.doors import count_line, matches_left, vectors_note
from bot.search.results import InvalidFilter, SearchResult, unrelated_mark

if TYPE_CHECKING:
    from bot.config import AppConfig
    from bot.services import Services

SEARCH_USAGE = "Usage: /search <query> [channel:telegram] [from:2026-02-01] [to:2026-02-28]"
ECHO_CHARS = 60  # of the query, repeated in the answer
_SEARCH_OPTIONS = ("channel", "from", "to")


def search_options(args: str) -> tuple[str, dict[str, str]]:
    """``/search`` arguments as (query, options): the filters ``channel:``, ``from:`` and
    ``to:`` (as words of their own, anywhere) are taken out, the rest is the query.
    :class:`InvalidFilter` naming a filter given twice: before session 42 the last one
    counted, silently (``from:2023-01-01 from:2024-01-01`` searched from 2024)."""
    words: list[str] = []
    options: dict[str, str] = {}
    for word in args.split():
        key, colon, value = word.partition(":")
        if colon and key.lower() in _SEARCH_OPTIONS:
            name = key.lower()
            if name in options:
                raise InvalidFilter(
                    f"{name}: is given twice ({name}:{options[name]} and {word}): give it once"
                )
            options[name] = value
        else:
            words.append(word)
    return " ".join(words), options


# The channels the owner talks on, as the error for another word lists them: the
# loopback ingress is for scripts and tests (still accepted, never offered).
OWNER_CHANNELS = ("web", "telegram", "email")


def search_channel(config: AppConfig, value: str | None) -> str | None:
    """``channel:`` as a channel name; :class:`InvalidFilter` naming it for another word
    (a typo matched nothing, read as "never talked about it")."""
    if value is None:
        return None
    if value.strip().lower() not in type(config.channels).model_fields:
        raise InvalidFilter(f"channel: {value!r} is not a channel (one of {_offered(config)})")
    return value.strip().lower()


def _offered(config: AppConfig) -> str:
    """The channels an error offers: those of ``config`` the owner talks on."""
    return ", ".join(c for c in type(config.channels).model_fields if c in OWNER_CHANNELS)


def filled_options(options: dict[str, str], config: AppConfig) -> dict[str, str]:
    """``options`` when each filter has a value; :class:`InvalidFilter` naming the first
    one without (``from:`` alone), with what it takes. Before session 41 an empty value
    was read as no filter: ``/search kayak from:`` searched every date, silently."""
    for key, value in options.items():
        if not value:
            if key == "channel":
                raise InvalidFilter(f"channel: has no value: give one of {_offered(config)}")
            raise InvalidFilter(f"{key}: has no value: give a date like 2026-02-14")
    return options


def focus_turn(result: SearchResult) -> int | None:
    """The turn a result opens at: the best-ranked, which its snippet quotes. The first
    matched turn (``matched_turns`` is in turn order) could lie hundreds of turns
    before it, and the conversation opened with the quoted turn out of view."""
    turns = [number for number, _ in result.turn_scores] or result.matched_turns
    return turns[0] if turns else None


async def search_answer(
    services: Services, args: str, message: InboundMessage, conv: ConversationRecord | None
) -> CommandResult:
    """The answer to ``/search args`` typed in ``conv`` (None: a dashboard tab without
    one): five results as lines, and as data for a channel that links them."""
    try:
        query, options = search_options(args)
    except InvalidFilter as exc:
        return CommandResult(f"{exc}\n{SEARCH_USAGE}")
    if not query:
        return CommandResult(SEARCH_USAGE)
    zone = owner_zone(services.config)  # the owner's day, as the assistant dates it
    try:
        filled_options(options, services.config)
        channel = search_channel(services.config, options.get("channel"))
        # a day without a time is that whole day of the owner's calendar
        date_from, date_to = day_range(
            options.get("from"), options.get("to"), zone, ("from:", "to:")
        )
    except InvalidFilter as exc:
        return CommandResult(f"{exc}\n{SEARCH_USAGE}")
    # Typed in a group, the answer is read by every member: the group's own
    # conversation only (it listed the owner's private chats to the group).
    in_group = bool(message.group_id) and conv is not None
    page = await services.search.search(
        query,
        channel=channel,
        date_from=date_from,
        date_to=date_to,
        limit=5,
        conversation_id=conv.id if in_group and conv else None,
    )
    # The query as typed, shortened: a pasted page was echoed whole (a 10 KB query
    # made a 12 KB answer, three Telegram messages of the owner's own text).
    quoted = f"'{isolate(shorten(' '.join(query.split()), ECHO_CHARS))}'"
    if page.no_words:
        return CommandResult(f"Nothing to search for in {quoted}: give words to look for.")
    keyword_only = page.method != "hybrid"
    # the vectors are rebuilt or missing: some conversations only by their words
    partial = not keyword_only and page.vectors_incomplete
    if not page.results:
        where = " with these filters" if channel or date_from or date_to else ""
        hint = " (keyword search only: try other words)" if keyword_only else ""
        if partial:
            hint = f" ({vectors_note(page)}: try other words)"
        return CommandResult(f"No conversations match {quoted}{where}.{hint}")
    heading = f"Results for {quoted}{' (keyword search only)' if keyword_only else ''}:"
    if page.match == "date":
        heading = f"No conversation uses the words of {quoted}; those of the dates it names:"
    elif page.match == "meaning":
        heading = f"No conversation uses the words of {quoted}; the closest by meaning:"
    elif page.match == "loose":
        # scores are relative: the first of any list scores 1, a perfect match or not
        heading = (
            f"Nothing mentions {quoted} or comes close to it; the nearest, probably unrelated:"
        )
    if partial:
        words_only = "some conversations are found by their words only"
        heading = f"{heading} ({vectors_note(page)}: {words_only})"
    lines = [heading]
    found: list[dict[str, object]] = []
    for i, r in enumerate(page.results, 1):
        snippet = cut(" ".join((r.snippet or "").split()), 160)
        rec = await services.conversations.get(r.conversation_id)
        # Named as the dashboard lists it (not "Untitled"): the record's title is
        # also fresher than the index row the search read.
        title = (
            display_title(
                rec.channel, await shown_title(services, rec), rec.channel_meta, rec.participants
            )
            if rec is not None
            else r.title or UNTITLED
        )
        day = local_day(r.timestamp, zone)
        where = r.found_in()
        # found by its title alone: no snippet, and no double space in its place
        said = f" {isolate(snippet)}" if snippet else ""
        lines.append(
            f"{i}. {title} [{r.channel}, {day}, {where}]{unrelated_mark(page, r)}"
            f"{said} ({r.conversation_id})"
        )
        found.append(
            {
                "conversationId": r.conversation_id,
                "title": title,
                "channel": r.channel,
                "day": day,
                "turnRange": r.turn_range,
                "focusTurn": focus_turn(r),
                "snippet": snippet,
                # the dashboard marks it as the text does (it listed such a result as
                # a match, unmarked)
                "unrelated": bool(unrelated_mark(page, r)),
            }
        )
    footer = ""
    if page.next_cursor:
        # Five are shown: without this the owner took them for all there were. The
        # matches are counted apart from the nearest listed after them (count_line);
        # narrowing down helps only when matches are left.
        narrow = "; add words or a filter (channel:, from:, to:) to narrow it down"
        footer = f"{count_line(page)}{narrow if matches_left(page) else ''}."
        lines.append(footer)
    # The same results as data, for a channel that can link them (the dashboard
    # opens each conversation from its answer); the text is for the others.
    extra: dict[str, object] = {"heading": heading, "results": found, "footer": footer}
    return CommandResult("\n".join(lines), extra=extra)
