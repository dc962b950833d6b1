"""``my-agent search``: the hybrid search of the conversation store from the shell.

A query with no words, a mistyped ``--channel`` or a date that is none is a usage error
said before the store and the embedding model are opened; the results say how they were
found (by keyword only, by meaning, or only the nearest) before they are listed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bot import exitcodes
from bot.cli_common import print_json, print_text
from bot.cli_store import _with_services, reading_config
from bot.graphemes import cut, shorten
from bot.labels import UNTITLED, shown_names


def cmd_search(args: argparse.Namespace) -> int:
    """``my-agent search QUERY``: the matches printed (``--json``: the page); the exit
    status."""
    config = reading_config(args, "search")
    if config is None:
        return exitcodes.EX_USAGE

    from bot.owner_days import day_range, local_day, owner_zone
    from bot.search.doors import count_line, vectors_note
    from bot.search.query import bounded_query, fts_parts
    from bot.search.results import InvalidCursor, InvalidFilter, unrelated_mark

    if not args.query.strip():
        # `search ""` answered "no match (keyword)" and exit 0, as if searched
        print("my-agent search: the query is empty: give the words to look for", file=sys.stderr)
        return exitcodes.EX_USAGE
    if not fts_parts(bounded_query(args.query)):
        # only punctuation, symbols or emoji: nothing to look for (SearchPage.no_words),
        # said before the store and the model are opened
        print(
            "my-agent search: the query has no words (only punctuation, symbols or emoji): "
            "give the words to look for",
            file=sys.stderr,
        )
        return exitcodes.EX_USAGE
    zone = owner_zone(config)  # --from/--to and the dates shown: the owner's days
    try:
        # named as typed: "date_from is not an ISO date" named no option of this command;
        # checked before the store and the model are opened (a usage error came after
        # the model's warning, and after the seconds it took to load)
        date_from, date_to = day_range(args.date_from, args.date_to, zone, ("--from", "--to"))
    except ValueError as exc:
        print(f"my-agent search: {exc}", file=sys.stderr)
        return exitcodes.EX_USAGE

    async def _search(s: Any) -> int:
        if s.search.vectors is not None:
            # Another model than the store's (the config edited, the daemon not restarted
            # yet; another MY_AGENT_EMBEDDING_MODEL_PATH): its vectors are the daemon's to
            # rebuild. Opened as the daemon opens them, they were all dropped.
            s.search.vectors.rebuilds = False
        await s.search.start()  # keyword-only without a model: the warning says why
        if args.conversation and await s.conversations.get(args.conversation) is None:
            # a mistyped id matched nothing, read as "never said there"
            print(f"my-agent search: no conversation {args.conversation}", file=sys.stderr)
            return 1
        try:
            page = await s.search.search(
                args.query,
                channel=args.channel,
                date_from=date_from,
                date_to=date_to,
                conversation_id=args.conversation,
                limit=args.limit,
                cursor=args.cursor,
            )
        except InvalidCursor as exc:  # a cursor that is not one, or of another query
            print(f"my-agent search: --cursor: {exc}", file=sys.stderr)
            return exitcodes.EX_USAGE
        except InvalidFilter as exc:  # (names its filter)
            print(f"my-agent search: {exc}", file=sys.stderr)
            return exitcodes.EX_USAGE
        # Any other ValueError is a bug (exit 70, its traceback with --verbose): it was
        # "--cursor: buffer is smaller than requested size", exit 64, with no --cursor.
        if args.json:
            print_json(page.to_dict())
            return 0
        if not page.results:
            filtered = args.channel or date_from or date_to or args.conversation
            where = " with these filters" if filtered else ""
            # a next page's matches were all listed before it (a conversation deleted
            # since): "no conversation matches" denied the pages just shown
            none = "no more conversations match" if args.cursor else "no conversation matches"
            print(f"{none} {shorten(' '.join(args.query.split()), 60)!r}{where}")
            if page.method != "hybrid":
                # without a model only the words themselves are found: say what to try
                print("(keyword search only: try other words, or synonyms)")
            elif page.vectors_incomplete:
                print(f"({vectors_note(page)}: try other words, or synonyms)")
        elif page.method != "hybrid":
            # found by their words only (no embedding model, or it failed on this query):
            # said before the results, as a miss by meaning is not a miss
            print("(keyword search only: conversations that say it in other words are missed)")
        elif page.vectors_incomplete:
            # vectors missing (being rebuilt, or not made yet while the daemon is stopped):
            # said first, as a miss is not a miss
            print(f"({vectors_note(page)}: some conversations are found by their words only)")
        if page.results and page.method == "hybrid":
            if page.match == "date":
                print("(no conversation uses these words: those of the dates they name)")
            elif page.match == "meaning":
                print("(no conversation uses these words: the closest by meaning)")
            elif page.match == "loose":
                # the scores are relative: the first of any list scores 1.000
                print(
                    "(nothing uses these words or comes close in meaning: "
                    "the nearest, probably unrelated)"
                )
        # named as the dashboard and /search name them (session 41: "New conversation"
        # for every unnamed mail thread and chat); the record's title is fresher too
        records = [await s.conversations.get(r.conversation_id) for r in page.results]
        names = await shown_names(s, [rec for rec in records if rec is not None])
        for r in page.results:
            # found through its notes or title alone: no matched turn to name
            where = r.found_in()
            name = names.get(r.conversation_id) or r.title or UNTITLED
            print_text(
                f"{r.score:.3f}  {r.conversation_id}  [{r.channel}] {name} "
                f"({where}, {local_day(r.timestamp, zone)}){unrelated_mark(page, r)}"
            )
            print_text(f"       {cut(' '.join((r.snippet or '').split()), 150)}")
        if page.next_cursor:  # the plain listing can be paged too, not only --json
            # the matches counted apart from the loosely related listed after them
            print(f"({count_line(page)}; next page: --cursor {page.next_cursor})")
        return 0

    return int(asyncio.run(_with_services(config, _search)))
