"""Keyword search: safe FTS queries, bm25 sign, filters, cursor pagination, result shape."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.config.model import AppConfig
from bot.db import Database
from bot.search import InvalidCursor, InvalidFilter, SearchService, fts_query, query_terms
from bot.search.query import fts_words, identifiers
from tests.recall_helpers import add_conversation, open_index


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = await open_index(tmp_path / "conversations.db")
    yield database
    await database.close()


@pytest.fixture
async def seeded(db: Database) -> Database:
    await add_conversation(
        db,
        "conv-deploy",
        [
            ("user", "The deploy failed with ERR-4521 on the staging server"),
            ("assistant", "ERR-4521 means the migration lock was held. Release it first."),
            ("user", "Thanks, that fixed the staging deploy"),
        ],
        channel="telegram",
        title="Staging Deploy Failure",
        day="2026-01-05",
        topics=["deploy", "staging"],
    )
    await add_conversation(
        db,
        "conv-garden",
        [
            ("user", "Which tomatoes grow well on a balcony?"),
            ("assistant", "Cherry tomatoes in large pots do well with six hours of sun."),
        ],
        channel="email",
        title="Balcony Tomatoes",
        day="2026-02-01",
    )
    await add_conversation(
        db,
        "conv-mention",
        [("user", "Unrelated chat that mentions the server once")],
        channel="web",
        day="2026-03-01",
    )
    return db


def test_fts_query_quotes_and_ors() -> None:
    assert fts_query("deploy staging") == '"deploy" OR "staging"'
    assert fts_query("the and of") == '"the" OR "and" OR "of"'  # only stop words: keep them
    assert fts_query("   ") is None
    assert fts_query("*** ---") is None
    q = fts_query("fix ERR-4521 now")
    assert q is not None and '"err-4521"' in q and '"4521"' in q
    assert query_terms("What did Alice say about Paris?") == ["alice", "paris"]


@pytest.mark.parametrize(
    "text",
    [
        'he said "deploy',
        "deploy*",
        "NEAR(deploy staging)",
        "deploy AND staging",
        "deploy NOT staging",
        "-deploy",
        "content: deploy",
        "conversation_id:conv-deploy",
        "(deploy OR",
        "^deploy",
        "déploiement café naïve 東京 🚀",
        "a \"b\" 'c' {d} [e] +f",
        "NEAR",
        "OR",
        '"',
        "",
    ],
)
async def test_user_text_never_raises_fts_errors(seeded: Database, text: str) -> None:
    page = await SearchService(AppConfig(), seeded).search(text)
    assert page.method == "keyword"
    if "deploy" in text.lower():
        assert page.results and page.results[0].conversation_id == "conv-deploy"


def test_function_words_of_german_spanish_and_french_are_not_search_words() -> None:
    """Regression: "Wie hieß der Klempner?" matched every German conversation through
    "der" (and "hat", "mit", "de", "el"): they came first, counted as matches, above the
    conversation asked about."""
    assert query_terms("Wie hieß der Klempner?") == ["klempner"]
    assert query_terms("Was hat die Reparatur der Bremsen gekostet?") == [
        "reparatur",
        "bremsen",
        "gekostet",
    ]
    assert query_terms("¿cuánto costó el fontanero?") == ["costó", "fontanero"]
    assert query_terms("receta de garbanzos") == ["receta", "garbanzos"]
    assert query_terms("le menu du jour") == ["menu", "jour"]
    # English words, names and places stay when nothing else says the query is foreign
    assert query_terms("What hat did she buy?") == ["hat", "buy"]
    assert query_terms("did the dog die") == ["dog", "die"]
    assert query_terms("trip to Los Angeles") == ["trip", "los", "angeles"]
    assert query_terms("Robert de Niro with Al Pacino") == ["robert", "niro", "al", "pacino"]
    assert query_terms("my MIT application") == ["mit", "application"]
    assert query_terms("der") == ["der"]  # nothing else: kept, as stop words are


def test_possessives_and_contractions_are_not_search_words() -> None:
    """Regression: "what's" was a search word (a phrase matching every "what's" of the
    store) and "daughter's" matched only the possessive, not "daughter"."""
    assert query_terms("What's my daughter's school like?") == ["daughter", "school"]
    assert query_terms("I'm sure we've said you\u2019re right about Anna\u2019s trip") == [
        "sure",
        "right",
        "anna",
        "trip",
    ]
    # a negation stays: the turn that answers may be the one that says it
    assert query_terms("What won't Jon do?") == ["won't", "jon"]
    assert query_terms("it's") == ["it"]  # nothing else: the stop words are kept


async def test_a_possessive_finds_the_word_itself(db: Database) -> None:
    await add_conversation(db, "conv-school", [("user", "My daughter started at the new school")])
    bus = [("user", "What's up with the school bus, what's late?")]
    await add_conversation(db, "conv-bus", bus)
    page = await SearchService(AppConfig(), db).search("What's my daughter's school like?")
    assert [r.conversation_id for r in page.results] == ["conv-school", "conv-bus"]


async def test_bm25_sign_best_match_first(seeded: Database) -> None:
    page = await SearchService(AppConfig(), seeded).search("staging server deploy")
    ids = [r.conversation_id for r in page.results]
    # conv-deploy matches all three words several times; conv-mention only "server".
    assert ids == ["conv-deploy", "conv-mention"]
    assert page.results[0].score > page.results[1].score > 0
    top = page.results[0]
    assert top.title == "Staging Deploy Failure"
    assert top.channel == "telegram"
    assert top.topics == ["deploy", "staging"]
    assert set(top.matched_turns) == {1, 3}
    assert top.turn_scores[0][1] >= top.turn_scores[-1][1]
    assert top.turn_range == "turns 1-3"
    assert "deploy" in top.snippet.lower()
    assert page.total == 2


async def test_a_pasted_log_as_a_query_reads_only_its_opening(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the offline brain searches with the owner's whole message; a pasted
    # log of megabytes made thousands of distinct words, each a keyword lookup of its
    # own, and held the index's reader for over a minute.
    from bot.search.keyword import DocFreqs

    looked_up: list[int] = []
    real = DocFreqs.selective

    def counting(self: DocFreqs, conn: object, parts: list[str]) -> list[str]:
        looked_up.append(len(parts))
        return real(self, conn, parts)  # type: ignore[arg-type]

    monkeypatch.setattr(DocFreqs, "selective", counting)
    log = "ERR-4521 on staging: " + " ".join(f"line{i} token{i * 7}" for i in range(200_000))
    assert len(log) > 2_000_000
    page = await SearchService(AppConfig(), seeded).search(log)
    assert [r.conversation_id for r in page.results][:1] == ["conv-deploy"]
    assert looked_up and max(looked_up) < 400


async def test_exact_identifier(seeded: Database) -> None:
    page = await SearchService(AppConfig(), seeded).search("ERR-4521")
    assert [r.conversation_id for r in page.results] == ["conv-deploy"]
    assert page.results[0].matched_turns == [1, 2]


async def test_porter_stemming(seeded: Database) -> None:
    page = await SearchService(AppConfig(), seeded).search("deploying tomato")
    assert {r.conversation_id for r in page.results} == {"conv-deploy", "conv-garden"}


async def test_filters(seeded: Database) -> None:
    service = SearchService(AppConfig(), seeded)
    assert [r.conversation_id for r in (await service.search("server", channel="web")).results] == [
        "conv-mention"
    ]
    page = await service.search("server", date_from="2026-02-01")
    assert [r.conversation_id for r in page.results] == ["conv-mention"]
    page = await service.search("server tomatoes", date_to="2026-02-01")
    assert {r.conversation_id for r in page.results} == {"conv-deploy", "conv-garden"}
    page = await service.search("server", date_from="2026-01-01", date_to="2026-01-31")
    assert [r.conversation_id for r in page.results] == ["conv-deploy"]
    page = await service.search("server", conversation_id="conv-mention")
    assert [r.conversation_id for r in page.results] == ["conv-mention"]


async def test_cursor_pagination(db: Database) -> None:
    for i in range(7):
        await add_conversation(db, f"conv-{i}", [("user", f"invoice number {i} " + "x " * i)])
    service = SearchService(AppConfig(), db)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await service.search("invoice", limit=3, cursor=cursor)
        assert page.total == 7
        seen.extend(r.conversation_id for r in page.results)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 3
    assert sorted(seen) == sorted(f"conv-{i}" for i in range(7))
    assert len(set(seen)) == 7
    first = await service.search("invoice", limit=3)
    assert first.next_cursor is not None
    with pytest.raises(InvalidCursor):
        await service.search("other words", cursor=first.next_cursor)
    with pytest.raises(InvalidCursor):
        await service.search("invoice", cursor="not-a-cursor!")


async def test_cursor_pages_survive_new_turns_between_pages(db: Database) -> None:
    # Regression: the cursor was an offset into a ranking cached for 2 minutes in one
    # process. `my-agent search --cursor` (a new process), a page after the 2 minutes or
    # after another search replaced the ranking ranked again, and a turn arriving in
    # between moved conversations across the page boundary: one listed twice, another
    # (the one the new turn lifted) never.
    for i in range(10):
        await add_conversation(db, f"conv-{i}", [("user", "invoice " * (10 - i) + "x " * 30)])
    first = await SearchService(AppConfig(), db).search("invoice", limit=4)
    seen = [r.conversation_id for r in first.results]
    assert seen == ["conv-0", "conv-1", "conv-2", "conv-3"]
    # the owner goes on talking: a new turn makes an old conversation the best match
    await add_conversation(db, "conv-new", [("user", "invoice " * 20)])
    cursor = first.next_cursor
    while cursor is not None:
        page = await SearchService(AppConfig(), db).search("invoice", limit=4, cursor=cursor)
        seen.extend(r.conversation_id for r in page.results)
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)), seen  # nothing twice
    assert set(seen) == {f"conv-{i}" for i in range(10)} | {"conv-new"}  # nothing skipped
    # within one process too, when a search without a cursor re-ranked meanwhile
    service = SearchService(AppConfig(), db)
    first = await service.search("invoice", limit=4)
    await add_conversation(db, "conv-newer", [("user", "invoice " * 30)])
    await service.search("invoice", limit=4)  # another client's first page
    page = await service.search("invoice", limit=4, cursor=first.next_cursor)
    shown = {r.conversation_id for r in first.results}
    assert not shown & {r.conversation_id for r in page.results}
    assert "conv-newer" in {r.conversation_id for r in page.results}


async def test_no_match(seeded: Database) -> None:
    page = await SearchService(AppConfig(), seeded).search("zeppelin")
    assert page.results == [] and page.total == 0 and page.next_cursor is None


# The pattern identifiers() replaced: the same tokens, found without its backtracking.
_OLD_IDENT = re.compile(r"\w+(?:[-_./:@#]\w+)+")


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab_-.:@# é1\u0663\u0301/x", max_size=16))
def test_identifiers_are_the_old_patterns_tokens(text: str) -> None:
    assert identifiers(text) == [m.group(0) for m in _OLD_IDENT.finditer(text)]


def test_identifiers_examples() -> None:
    text = "ERR-4521 in v1.2.3 of foo_bar, mail a@b.c, not a--b or _x, __init__ yes"
    assert identifiers(text) == ["ERR-4521", "v1.2.3", "foo_bar", "a@b.c", "__init__"]


def test_a_huge_word_is_searched_in_linear_time() -> None:
    # Regression: 22 s for a 40,000-character word (quadratic backtracking, on the event
    # loop: an offline reply searches for the message, so one pasted blob froze the daemon,
    # and again at every restart when the reply was resumed). A child process, so that a
    # regression fails here instead of hanging the suite.
    code = (
        "from bot.search.query import fts_query\n"
        "assert fts_query('B' * 2_000_000 + ' x-' * 200_000)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def test_a_backwards_date_range_is_refused(seeded: Database) -> None:
    # Regression: from after to matched nothing, silently, like a search with no hit.
    service = SearchService(AppConfig(), seeded)
    with pytest.raises(InvalidFilter, match="date_from 2026-03-01 is after date_to 2026-02-01"):
        await service.search("deploy", date_from="2026-03-01", date_to="2026-02-01")
    page = await service.search("deploy", date_from="2026-01-05", date_to="2026-01-05T23:59")
    assert [r.conversation_id for r in page.results] == ["conv-deploy"]
    # two times of one day, backwards (it passed: only the days were compared)
    with pytest.raises(InvalidFilter, match="date_from 2026-01-05T18:00 is after date_to 20"):
        await service.search("deploy", date_from="2026-01-05T18:00", date_to="2026-01-05T09:00")
    with pytest.raises(InvalidFilter, match="is after"):
        await service.search(
            "deploy", date_from="2026-01-05T18:00Z", date_to="2026-01-05T20:00+05:00"
        )
    page = await service.search("deploy", date_from="2026-01-05T09:00", date_to="2026-01-05T18:00")
    assert [r.conversation_id for r in page.results] == ["conv-deploy"]


async def test_matched_turns_name_each_turn_once(db: Database) -> None:
    # Regression: a user turn and its reply share a turn number, and both matching listed
    # it twice ("matchedTurns": [1, 1, 2]).
    await add_conversation(
        db,
        "conv-pair",
        [("user", "the boiler pressure"), ("assistant", "boiler pressure is low")],
    )
    await db.execute("UPDATE turns SET turn_number = 1 WHERE conversation_id = 'conv-pair'")
    page = await SearchService(AppConfig(), db).search("boiler pressure")
    assert page.results[0].matched_turns == [1]


async def test_a_result_is_dated_when_its_matched_words_were_said(db: Database) -> None:
    # Regression: a result carried its conversation's last activity, so a long (pinned)
    # conversation's words of January, found with --from/--to in January, were listed
    # (CLI, /search, the recall tool, the offline brain) under the day of its last
    # message, months later: the filter looked broken.
    await add_conversation(
        db,
        "conv-long",
        [
            ("user", "the garden hose broke again"),
            ("assistant", "noted"),
            ("user", "we bought a new lawn mower"),
        ],
        day="2026-01-10",
    )

    def _later(conn) -> None:  # type: ignore[no-untyped-def]
        conn.execute(
            "UPDATE turns SET timestamp = '2026-03-02T12:00:00+00:00' WHERE turn_number = 3"
        )
        conn.execute("UPDATE conversations SET updated = '2026-03-02T12:00:00+00:00'")

    await db.run(_later)
    service = SearchService(AppConfig(), db)
    for dates in ({}, {"date_from": "2026-01-10", "date_to": "2026-01-10"}):
        (result,) = (await service.search("garden hose", **dates)).results
        assert result.timestamp.startswith("2026-01-10"), dates
    (result,) = (await service.search("lawn mower")).results
    assert result.timestamp.startswith("2026-03-02")


def test_numbers_are_searched_with_and_without_thousands_separators() -> None:
    # the tokenizer indexes "1,187" as the phrase "1 187": the bare number must ask for it
    assert fts_query("invoice 1187") == '"invoice" OR "1187" OR "1 187"'
    q = fts_query("the 1,187 charge") or ""
    assert '"1187"' in q and '"1 187"' in q
    assert '"1 187 000"' in (fts_query("1.187.000 Euro") or "")
    assert '"1187"' in (fts_query("1'187 CHF") or "")
    assert "12 34" not in (fts_query("12,34") or "")  # a decimal comma groups nothing
    assert '"123"' in (fts_query("code 0123 or 123") or "")
    assert "0 123" not in (fts_query("code 0123") or "")
    assert "4 521" not in (fts_query("deploy ERR-4521") or "")  # part of an identifier
    # a query naming a participant asks for its other words through fts_words
    assert fts_words(["paid", "1187"], "Anna paid 1187") == ["paid", "1187", "1 187"]
    assert fts_words(["err", "4521"], "Anna ERR-4521") == ["err", "4521"]


@pytest.mark.parametrize(
    ("said", "asked"),
    [("The invoice came to $1,187 in the end", "1187"), ("Paid 1187 for it", "1,187 invoice")],
)
async def test_a_number_finds_its_grouped_writing(db: Database, said: str, asked: str) -> None:
    """Regression: "1187" did not find "$1,187" (indexed as "1" "187")."""
    await add_conversation(db, "conv-money", [("user", said)])
    await add_conversation(db, "conv-other", [("user", "We met 1 time and then 187 days later")])
    page = await SearchService(AppConfig(), db).search(asked)
    assert [r.conversation_id for r in page.results][:1] == ["conv-money"]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
def test_the_calendars_edges_bound_nothing(zone: str) -> None:
    # Regression: "to 9999-12-31" (no day after it) and "from 0001-01-01" east of UTC (no
    # UTC moment) raised OverflowError: exit 70 from `search`, "failed internally" to the
    # model's search_conversations
    from zoneinfo import ZoneInfo

    from bot.owner_days import day_range

    first, last = day_range("0001-01-01", "9999-12-31", ZoneInfo(zone))
    assert first is not None and first.startswith("0001-01-01T")  # west of UTC: its hours
    assert last == "9999-12-31T23:59:59.999Z"


def test_a_range_is_compared_as_the_moments_it_names() -> None:
    # Regression (session 41): a range was compared as text before its bounds were read
    # in the owner's zone, so a start at another offset than the owner's, ending on a
    # bare day, was refused as "after" it: 2026-03-02T01:00+05:00 is 15:00 of the 1st
    # in New York, accepted when written as 2026-03-01T15:00-05:00.
    from zoneinfo import ZoneInfo

    from bot.owner_days import day_range

    zone = ZoneInfo("America/New_York")
    names = ("from:", "to:")
    for start in ("2026-03-01T15:00-05:00", "2026-03-02T01:00+05:00", "2026-03-01T20:00Z"):
        assert day_range(start, "2026-03-01", zone, names) == (
            "2026-03-01T20:00:00.000Z",
            "2026-03-02T04:59:59.999Z",  # the end of the 1st in New York, inclusive
        )
    # and the other way round: a bare day against the same moment at another offset
    assert day_range("2026-03-01", "2026-03-01T19:00-05:00", zone, names)[1] == (
        "2026-03-02T00:00:00.000Z"
    )
    assert day_range("2026-03-01", "2026-03-02T05:00+05:00", zone, names)[1] == (
        "2026-03-02T00:00:00.000Z"
    )
    # a start on the same moment as its end, and a timestamp without an offset (the
    # owner's zone) against one with: accepted
    assert day_range("2026-03-01T10:00", "2026-03-01T15:00Z", zone, names)[0] == (
        "2026-03-01T15:00:00.000Z"
    )
    # still refused when it really ends before it starts, naming the values as typed
    for start, end in (
        ("2026-03-02", "2026-03-01"),
        ("2026-03-01T18:00", "2026-03-01T09:00"),
        ("2026-03-01T10:01", "2026-03-01T15:00Z"),
        ("2026-03-02T10:00+05:00", "2026-03-01"),  # 00:00 of the 2nd in New York
    ):
        with pytest.raises(InvalidFilter, match=re.escape(f"from: {start} is after to: {end}")):
            day_range(start, end, zone, names)
