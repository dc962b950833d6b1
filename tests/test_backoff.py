"""Reconnect and retry delays (bot/backoff.py), shared by Telegram's polling and sends,
IMAP's reconnects and unfetched mail, and the Anthropic API's retries."""

from __future__ import annotations

import pytest

from bot.backoff import Backoff, doubled
from channels.email.backoff import Backoff as EmailBackoff
from channels.telegram.retries import Backoff as TelegramBackoff


def test_doubling_stops_at_the_cap() -> None:
    assert [doubled(1.0, n, 8.0) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert doubled(0.5, -3, 10.0) == 0.5  # a count below zero is the first try


@pytest.mark.parametrize("attempt", [1_023, 1_024, 10**6])
def test_any_count_of_failures_stays_at_the_cap(attempt: int) -> None:
    # Regression: base * 2**1024 raised OverflowError ("int too large to convert to
    # float"): Telegram's polling task ended at its 1,024th failed poll in a row (about
    # 13 hours of an outage at the 60 s cap) while the daemon went on saying "ready".
    assert doubled(1.0, attempt, 60.0) == 60.0
    assert doubled(0.001, attempt, 60.0) == 60.0


@pytest.mark.parametrize("kind", [Backoff, EmailBackoff, TelegramBackoff])
def test_a_backoff_fails_for_ever_at_its_cap(kind: type[Backoff]) -> None:
    backoff = kind(1.0, 60.0, rng=lambda: 1.0)
    delays = [backoff.next() for _ in range(1_100)]
    assert delays[:3] == [1.0, 2.0, 4.0] and set(delays[10:]) == {60.0}
    backoff.reset()
    assert backoff.next() == 1.0
