"""Dashboard authentication: the owner token, login sessions and the login rate limit.

The token is generated on first run and kept in ``data_dir/web_token`` with mode 0600;
the daemon prints it at start. A browser exchanges it once on the login page for a
session id held in an HttpOnly, SameSite=Strict cookie. Sessions live in memory (a
restart asks for the token again), are compared in constant time and expire after
``channels.web.session_ttl_hours``.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("my_agent.web.auth")

COOKIE_NAME = "my_agent_session"
Clock = Callable[[], float]


def load_or_create_token(path: Path) -> str:
    """Read the dashboard token at ``path``, creating it (mode 0600) when missing.

    A file readable by others is tightened to 0600 rather than trusted as is.
    """
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if token:
        if path.stat().st_mode & 0o077:
            log.warning("tightening permissions of %s to 0600", path)
            path.chmod(0o600)
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    # O_EXCL-free create with 0600 from the start: the token is never world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    path.chmod(0o600)
    return token


def token_matches(expected: str, given: str) -> bool:
    """Constant-time token comparison."""
    return hmac.compare_digest(expected.encode(), given.strip().encode())


class SessionStore:
    """Login sessions: random ids with an expiry, checked in constant time."""

    def __init__(self, ttl_seconds: float, clock: Clock = time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._sessions: dict[str, float] = {}

    def create(self) -> str:
        """A new session id valid for the configured time."""
        self._purge()
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = self._clock() + self._ttl
        return sid

    def valid(self, sid: str | None) -> bool:
        """True when ``sid`` names a live session."""
        if not sid:
            return False
        expiry = self._sessions.get(sid)
        if expiry is None:
            # Still spend a comparison so a miss and a hit take similar time.
            hmac.compare_digest(sid, sid)
            return False
        if expiry < self._clock():
            self._sessions.pop(sid, None)
            return False
        return True

    def revoke(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(sid, None)

    def __len__(self) -> int:
        return len(self._sessions)

    def _purge(self) -> None:
        now = self._clock()
        for sid in [s for s, exp in self._sessions.items() if exp < now]:
            del self._sessions[sid]


class RateLimiter:
    """Sliding-window limit of login attempts per client address."""

    def __init__(
        self, attempts: int, window_seconds: float = 60.0, clock: Clock = time.monotonic
    ) -> None:
        self._attempts = attempts
        self._window = window_seconds
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    def check(self, client: str) -> float:
        """Record an attempt by ``client``; 0 if allowed, else seconds until the next one."""
        now = self._clock()
        hits = self._hits.setdefault(client, deque())
        while hits and hits[0] <= now - self._window:
            hits.popleft()
        if len(hits) >= self._attempts:
            return max(hits[0] + self._window - now, 0.001)
        hits.append(now)
        if len(self._hits) > 10_000:  # bound memory under a flood of distinct clients
            for key in [k for k, v in self._hits.items() if not v]:
                del self._hits[key]
        return 0.0

    def reset(self, client: str) -> None:
        """Forget ``client``'s attempts (after a successful login)."""
        self._hits.pop(client, None)
