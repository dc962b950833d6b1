"""Sender authentication from ``Authentication-Results`` headers (RFC 8601).

A From address is only as good as the receiving server's verdict on it. The server that
accepted the mail records DKIM/SPF/DMARC results in an ``Authentication-Results`` header;
:func:`verify_sender` decides whether the configured methods passed *for the From
domain*:

* ``require`` lists the methods that count (``dkim``, ``spf``, ``dmarc``);
  ``require_all=False`` means any one passing is enough;
* with ``auth_serv_id`` set, only the topmost header written by that server counts (a
  sender can put any ``Authentication-Results`` header into the mail it sends, naming our
  server too; only the one our own receiving server prepended is trustworthy, and it lies
  above any the sender wrote, so production setups should set it); without it only the
  topmost header counts, the one the receiving server prepended (RFC 8601 section 4);
* with ``aligned=True`` (the default), a DKIM pass counts only for a signing domain
  (``header.d``) and an SPF pass only for an envelope domain (``smtp.mailfrom``) that is
  the From domain or a parent/child of it, the "relaxed alignment" of DMARC. Without it an
  attacker could sign with their own domain and put the owner's address in From.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_TOKEN = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:/[0-9]+)?\s*=\s*([A-Za-z0-9_-]+)")
# A property ("header.d=example.org") starts only where a run of its characters does:
# tried from every character of a long run without a dot, findall was quadratic (a
# 30,000-character clause took 1.5 s; anyone may add an Authentication-Results header).
# The lookbehind changes no result: a match inside a run would have matched from its start.
_PROP = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)\s*=\s*(\"[^\"]*\"|[^\s;]+)")


@dataclass(frozen=True)
class MethodResult:
    """One ``method=result`` clause with its properties (``header.d``, ``smtp.mailfrom``)."""

    method: str
    result: str
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AuthResults:
    """One parsed ``Authentication-Results`` header."""

    authserv_id: str
    results: tuple[MethodResult, ...]


@dataclass(frozen=True)
class AuthVerdict:
    """Whether the sender is authenticated, and why (logged and kept in metadata)."""

    verified: bool
    passed: tuple[str, ...]
    reason: str


def _strip_comments(value: str) -> str:
    """Remove RFC 5322 comments ``( ... )`` (nested, outside quoted strings)."""
    out: list[str] = []
    depth = 0
    quoted = False
    escaped = False
    for ch in value:
        if escaped:
            escaped = False
            if depth == 0:
                out.append(ch)
            continue
        if ch == "\\":
            escaped = True
            if depth == 0:
                out.append(ch)
            continue
        if ch == '"' and depth == 0:
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
            continue
        elif not quoted and ch == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out)


def _split(value: str) -> list[str]:
    """Split on ``;`` outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in value:
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_auth_results(value: str) -> AuthResults | None:
    """Parse one header value; None when it has no authserv-id at all."""
    parts = _split(_strip_comments(value))
    head = parts[0].split()
    if not head:
        return None
    results: list[MethodResult] = []
    for clause in parts[1:]:
        match = _TOKEN.match(clause)
        if not match:
            continue  # "none" or garbage
        props = {k.lower(): v.strip('"') for k, v in _PROP.findall(clause[match.end() :])}
        results.append(MethodResult(match.group(1).lower(), match.group(2).lower(), props))
    return AuthResults(authserv_id=head[0].lower(), results=tuple(results))


def _domain(value: str | None) -> str:
    if not value:
        return ""
    return value.rsplit("@", 1)[-1].strip().strip(">").lower().rstrip(".")


def _aligned(a: str, b: str) -> bool:
    if not a or not b:
        return False
    return a == b or a.endswith("." + b) or b.endswith("." + a)


def _passes(res: MethodResult, from_domain: str, aligned: bool) -> bool:
    if res.result != "pass":
        return False
    if not aligned:
        return True
    p = res.properties
    if res.method == "dkim":
        return _aligned(_domain(p.get("header.d") or p.get("header.i")), from_domain)
    if res.method == "spf":
        return _aligned(_domain(p.get("smtp.mailfrom") or p.get("smtp.helo")), from_domain)
    if res.method == "dmarc":
        header_from = p.get("header.from")
        return header_from is None or _aligned(_domain(header_from), from_domain)
    return True


def verify_sender(
    headers: Iterable[str],
    from_addr: str | None,
    *,
    require: Sequence[str],
    require_all: bool = False,
    auth_serv_id: str | None = None,
    aligned: bool = True,
) -> AuthVerdict:
    """The verdict for ``from_addr`` given the raw ``Authentication-Results`` values."""
    wanted = [m.lower() for m in require]
    if not wanted:
        return AuthVerdict(True, (), "no authentication required by config")
    from_domain = _domain(from_addr)
    if not from_domain:
        return AuthVerdict(False, (), "no From address")
    considered = 0
    passed: set[str] = set()
    for raw in headers:
        parsed = parse_auth_results(raw)
        if parsed is None:
            continue
        if auth_serv_id is not None and parsed.authserv_id != auth_serv_id.lower():
            continue
        if considered:
            # Only the topmost header counts (of our server, with auth_serv_id): any
            # sender can add one claiming "dkim=pass" for the owner's domain below the
            # receiver's own, and name our server in it. Passes were added up over every
            # header of that name: a forged "mx.example.com; dkim=pass" below our
            # server's "dkim=none; spf=fail" made the owner's address verified (session
            # 38), and the mail ran /trust as the owner's.
            break
        considered += 1
        for res in parsed.results:
            if res.method in wanted and _passes(res, from_domain, aligned):
                passed.add(res.method)
    if considered == 0:
        where = f" from {auth_serv_id}" if auth_serv_id else ""
        return AuthVerdict(False, (), f"no Authentication-Results{where}")
    ok = all(m in passed for m in wanted) if require_all else bool(passed)
    missing = [m for m in wanted if m not in passed]
    reason = (
        f"passed: {', '.join(sorted(passed))}"
        if ok
        else f"not passed for {from_domain}: {', '.join(missing)}"
    )
    return AuthVerdict(ok, tuple(sorted(passed)), reason)
