"""What the doors (``/search``, ``my-agent search``) say of a page beside its results:
how many are shown of how many matches, and why search by meaning was incomplete. One
wording for both, read from the :class:`~bot.search.results.SearchPage`."""

from __future__ import annotations

from bot.search.results import REBUILDING, VECTORS_MISSING, SearchPage


def count_line(page: SearchPage) -> str:
    """How many of a page's conversations are shown, the matches counted apart from the
    loosely related (``loose``), for /search and ``my-agent search`` under a page that
    has more: "5 of 12 matches shown", "5 of 12 matches shown, 45 others probably
    unrelated", "5 shown: 1 of 1 match, 4 of 5 probably unrelated", or on a page of
    nothing but those "5 of 57 shown, all probably unrelated". ``total`` alone ("5 of 57
    shown") counted every conversation the vector stage listed as the nearest."""
    shown = len(page.results)
    loose_shown = sum(r.match == "loose" for r in page.results)
    matches = page.total - page.loose
    if matches <= 0:
        return f"{shown} of {page.total} shown, all probably unrelated"
    more = "" if page.total_exact else "+"
    noun = "match" if matches == 1 and page.total_exact else "matches"
    if not page.loose:
        return f"{shown} of {matches}{more} {noun} shown"
    if not loose_shown:
        return f"{shown} of {matches}{more} {noun} shown, {page.loose} others probably unrelated"
    return (
        f"{shown} shown: {shown - loose_shown} of {matches}{more} {noun}, "
        f"{loose_shown} of {page.loose} probably unrelated"
    )


def matches_left(page: SearchPage) -> bool:
    """Whether matches are left beyond a first page (not only loosely related ones),
    which more words or a filter would narrow down."""
    shown = sum(r.match != "loose" for r in page.results)
    return not page.total_exact or page.total - page.loose > shown


def vectors_note(page: SearchPage) -> str:
    """What a door says of a page's ``vectors_incomplete``: :data:`REBUILDING` while
    they are rebuilt, else :data:`VECTORS_MISSING`."""
    return REBUILDING if page.vectors_rebuilding else VECTORS_MISSING
