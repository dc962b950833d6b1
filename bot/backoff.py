"""Reconnect and retry delays: exponential, capped, with jitter, reset on success.

The channels' reconnect loops (Telegram's long polling, IMAP) and their retries use one
:class:`Backoff`; :func:`doubled` is its growth, for the loops that keep their own count.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# Past this many doublings every delay is at its cap anyway (2**60 times any base in
# seconds is beyond any cap): the exponent stops here, and the count can grow for ever.
_MAX_DOUBLINGS = 60


def doubled(base: float, attempt: int, cap: float) -> float:
    """``base * 2**attempt``, at most ``cap``, for any ``attempt``. ``2**1024`` is past a
    float: Telegram's polling backoff raised OverflowError at its 1,024th failed poll in a
    row (about 13 hours of an unreachable server at the 60 s cap), which ended the polling
    task for good while the daemon said "ready" (session 38)."""
    return min(cap, base * 2.0 ** min(max(attempt, 0), _MAX_DOUBLINGS))


class Backoff:
    """Exponential delays with "equal jitter" (half fixed, half random: reconnects of
    several clients never synchronise, and none comes at once). Reset on success."""

    def __init__(self, base: float, cap: float, rng: Callable[[], float] = random.random) -> None:
        self.base, self.cap, self.rng = base, cap, rng
        self.attempt = 0

    def next(self) -> float:
        """The delay before the next try (the count of tries so far goes up by one)."""
        delay = doubled(self.base, self.attempt, self.cap)
        self.attempt += 1
        return delay / 2 + self.rng() * delay / 2

    def reset(self) -> None:
        """A try succeeded: the next failure starts from ``base`` again."""
        self.attempt = 0
