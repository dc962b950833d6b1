"""Dashboard authentication: the owner token, login sessions and the login rate limit.

The token is generated on first run and kept in ``data_dir/web_token`` with mode 0600;
the daemon prints it at start. A browser exchanges it once on the login page for a
session id held in an HttpOnly, SameSite=Strict cookie. Sessions are kept as hashes in
``data_dir/web_sessions.json`` (0600) so a restart does not log the browser out, and
expire after ``channels.web.session_ttl_hours``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("my_agent.web.auth")

# The name every daemon used until session 26. Cookies are per host, not per port: two
# daemons on one host (a test instance beside the real one) overwrote each other's
# cookie, and logging in to one logged the other out. Each instance now names its own
# (cookie_name); a valid session under this name is carried over once (login.py).
LEGACY_COOKIE_NAME = "my_agent_session"
Clock = Callable[[], float]


def cookie_name(data_dir: Path) -> str:
    """The session cookie's name for the daemon whose data is in ``data_dir``: distinct per
    instance (two on one host no longer share it), stable across restarts and ports."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{LEGACY_COOKIE_NAME}_{digest}"


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


def login_client(remote: str | None, headers: Mapping[str, str]) -> str:
    """Who the login rate limit counts a request against: its peer address, or, when the
    peer is this machine (the reverse proxy docs/web.md recommends), the client address
    that proxy appended (the last ``X-Forwarded-For`` entry, or ``Forwarded: for=``).

    Behind the proxy every browser arrived from 127.0.0.1, so one stranger guessing
    tokens locked the owner out too, a minute at a time. Only the last entry is read: a
    client can write earlier ones itself, but the proxy appends the address it saw; and
    a peer that is not local cannot choose its key through the header at all, and an
    IPv6 peer is counted by its /64 (what one host is given).
    """
    peer = remote or "unknown"
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        address = None
    local = address.is_loopback if address else peer == "unknown"  # "unknown": a Unix socket
    if not local:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
            # one host holds a whole /64: each of its addresses was a client of its own
            return str(ipaddress.IPv6Network((address, 64), strict=False))
        return peer
    forwarded_for = headers.get("X-Forwarded-For", "").split(",")[-1].strip()
    if not forwarded_for:
        forwarded_for = forwarded(headers, "for", last=True)
    return f"{peer} for {forwarded_for}" if forwarded_for else peer


def forwarded(headers: Mapping[str, str], name: str, *, last: bool = False) -> str:
    """The ``name`` parameter of the ``Forwarded`` header's first element (the browser's
    side), or with ``last`` of its last one (what the nearest proxy saw); "" if absent."""
    elements = headers.get("Forwarded", "").split(",")
    for part in elements[-1 if last else 0].split(";"):
        key, _, value = part.strip().partition("=")
        if key.lower() == name:
            return value.strip().strip('"')
    return ""


def token_matches(expected: str, given: str) -> bool:
    """Constant-time token comparison."""
    return hmac.compare_digest(expected.encode(), given.strip().encode())


class SessionStore:
    """Login sessions: random ids with a wall-clock expiry.

    Only a SHA-256 of each id is kept (looking up a hash does not leak the secret through
    timing), and with ``path`` the table survives a daemon restart in a 0600 JSON file, so
    a restart does not log the browser out.
    """

    def __init__(
        self, ttl_seconds: float, clock: Clock = time.time, path: Path | None = None
    ) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._path = path
        self._sessions: dict[str, float] = self._load()

    @staticmethod
    def _key(sid: str) -> str:
        return hashlib.sha256(sid.encode()).hexdigest()

    def create(self) -> str:
        """A new session id valid for the configured time."""
        self._purge()
        sid = secrets.token_urlsafe(32)
        self._sessions[self._key(sid)] = self._clock() + self._ttl
        self._save()
        return sid

    def valid(self, sid: str | None) -> bool:
        """True when ``sid`` names a live session."""
        if not sid or len(sid) > 256:
            return False
        key = self._key(sid)
        expiry = self._sessions.get(key)
        if expiry is None:
            return False
        now = self._clock()
        if expiry < now:
            del self._sessions[key]
            self._save()
            return False
        if expiry > now + self._ttl:
            # Dated before the clock was set back (a wrong clock fixed by days): it
            # lived the ttl plus the jump. The ttl counts from now instead.
            self._sessions[key] = now + self._ttl
            self._save()
        return True

    def revoke(self, sid: str | None) -> None:
        if sid and self._sessions.pop(self._key(sid), None) is not None:
            self._save()

    def __len__(self) -> int:
        return len(self._sessions)

    def _purge(self) -> None:
        now = self._clock()
        for key in [k for k, exp in self._sessions.items() if exp < now]:
            del self._sessions[key]

    def _load(self) -> dict[str, float]:
        if self._path is None:
            return {}
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable session file %s: %s", self._path, exc)
            return {}
        now = self._clock()
        if not isinstance(raw, dict):
            return {}
        return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float) and v >= now}

    def _save(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self._sessions, fh)
            os.replace(tmp, self._path)
        except OSError as exc:  # sessions still work in memory
            log.warning("cannot save dashboard sessions to %s: %s", self._path, exc)


class RateLimiter:
    """Sliding-window limit of login attempts per client address, and per peer across
    the clients a local proxy names (:func:`login_client`).

    Every client a proxy names shares its peer's ceiling (``peer_factor`` times a
    client's attempts): the proxy's header is what the client sent when no proxy is
    there, and a local process writing a new ``X-Forwarded-For`` per try had no limit
    at all (session 38). Clients are kept in the order of their last attempt, so the
    ones whose attempts have left the window are forgotten from the front in O(1) per
    attempt (a scan of every client past 10,000 made a flood of forged addresses cost
    6 ms of event loop per try), and never more than ``max_clients`` are kept.
    """

    def __init__(
        self,
        attempts: int,
        window_seconds: float = 60.0,
        clock: Clock = time.monotonic,
        *,
        peer_factor: int = 20,
        max_clients: int = 10_000,
    ) -> None:
        self._attempts = attempts
        self._window = window_seconds
        self._clock = clock
        self._peer_attempts = attempts * peer_factor
        self._max = max_clients
        self._hits: OrderedDict[str, deque[float]] = OrderedDict()
        self._peers: OrderedDict[str, deque[float]] = OrderedDict()
        self._told: OrderedDict[str, float] = OrderedDict()

    def check(self, client: str, peer: str | None = None) -> float:
        """Record an attempt by ``client`` (named by the proxy at ``peer``, if any); 0 if
        allowed, else seconds until the next one. A refused attempt is not recorded."""
        now = self._clock()
        hits = self._bucket(self._hits, client, now)
        if len(hits) >= self._attempts:
            return max(hits[0] + self._window - now, 0.001)
        shared = self._bucket(self._peers, peer, now) if peer is not None else None
        if shared is not None and len(shared) >= self._peer_attempts:
            return max(shared[0] + self._window - now, 0.001)
        hits.append(now)
        if shared is not None:
            shared.append(now)
        return 0.0

    def first_refusal(self, client: str) -> bool:
        """Whether ``client``'s refusal is the first told in a window: a client trying
        on made one warning a try (30,000 lines a minute under a flood)."""
        now = self._clock()
        told = self._told.get(client)
        if told is not None and told > now - self._window:
            return False
        self._told[client] = now
        self._told.move_to_end(client)
        self._forget(self._told, now, lambda at: at)
        return True

    def _bucket(self, table: OrderedDict[str, deque[float]], key: str, now: float) -> deque[float]:
        hits = table.get(key)
        if hits is None:
            hits = table[key] = deque()
        table.move_to_end(key)
        while hits and hits[0] <= now - self._window:
            hits.popleft()
        self._forget(table, now, lambda kept: kept[-1] if kept else now - self._window)
        return hits

    def _forget(
        self, table: OrderedDict[str, Any], now: float, last: Callable[[Any], float]
    ) -> None:
        """Drop from the front (the oldest last attempt) what has left the window, and
        whatever is past ``max_clients``; the entry just used is at the back."""
        horizon = now - self._window
        while len(table) > 1:
            key, value = next(iter(table.items()))
            if last(value) > horizon and len(table) <= self._max:
                break
            del table[key]

    def __len__(self) -> int:
        """How many clients are remembered."""
        return len(self._hits)

    def reset(self, client: str) -> None:
        """Forget ``client``'s attempts (after a successful login)."""
        self._hits.pop(client, None)
