"""The IMAP reconnect delays: exponential with jitter, reset once a session has held."""

from __future__ import annotations

import random

# A session that ends sooner than this after its sync does not reset the backoff: a
# server that accepts the login and drops the connection at once (IDLE refused, a proxy
# cutting it) was reconnected about every second, a warning each time, for hours.
STABLE_SESSION_SECONDS = 60.0


class Backoff:
    """Exponential reconnect delays with jitter, reset once a session has held."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * (2**self.attempt))
        self.attempt += 1
        return delay * random.uniform(0.5, 1.0)  # jitter: reconnects never synchronise

    def reset(self) -> None:
        self.attempt = 0
