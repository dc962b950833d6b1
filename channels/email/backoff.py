"""The IMAP reconnect delays: exponential with jitter, reset once a session has held."""

from __future__ import annotations

from bot.backoff import Backoff

# A session that ends sooner than this after its sync does not reset the backoff: a
# server that accepts the login and drops the connection at once (IDLE refused, a proxy
# cutting it) was reconnected about every second, a warning each time, for hours.
STABLE_SESSION_SECONDS = 60.0

__all__ = ["STABLE_SESSION_SECONDS", "Backoff"]
