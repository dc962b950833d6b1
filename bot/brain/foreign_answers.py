"""Error answers that are not the Messages API's own: a proxy's, a firewall's or a web
server's page between us and the model service.

The API answers an error with JSON, ``{"type": "error", "error": {"type": ..., "message":
...}}``; the SDK classes any answer by its status alone. Before session 41 a corporate
proxy's HTML 403 was taken for the API refusing the key ("permission denied"), and its
413 for a conversation too long for the model (compressed, then "start a new
conversation"), the page's HTML quoted as the API's words. :func:`foreign_excerpt` tells
such an answer apart and gives a short plain excerpt of it to say what really happened.
"""

from __future__ import annotations

import html
import re
from typing import Any

EXCERPT_CHARS = 120

_HIDDEN = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SPACE = re.compile(r"\s+")


def plain_excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` (HTML or not) as one short line of plain words: no tags, scripts or
    styles, entities decoded, whitespace collapsed, at most ``limit`` characters. A
    page's title goes first when its body does not repeat it."""
    title_found = _TITLE.search(text)
    title = _plain(title_found.group(1)) if title_found else ""
    body = _plain(_HIDDEN.sub(" ", _COMMENT.sub(" ", text)))
    shown = body if not title or title.lower() in body.lower() else f"{title}: {body}"
    shown = shown.strip(" :") or "(an empty body)"
    return shown if len(shown) <= limit else shown[: limit - 1].rstrip() + "…"


def _plain(fragment: str) -> str:
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", fragment))).strip()


def foreign_excerpt(exc: Any) -> str | None:
    """A plain excerpt of the error answer of ``exc`` (an ``anthropic.APIStatusError``)
    when it is not the API's own error, else None. The API's carries an ``error`` object
    with its ``type`` (``permission_error``, ``request_too_large`` ...); a page, or JSON
    of another shape, is someone else's answer. An error frame inside a stream (the
    stream's own 200) is always the API's."""
    if getattr(exc, "status_code", 0) < 400:
        return None
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("type"), str):
        return None
    try:
        text = exc.response.text
    except Exception:  # a body not read (a stream): what the SDK kept of it
        text = body if isinstance(body, str) else str(exc)
    return plain_excerpt(text or "")


__all__ = ["EXCERPT_CHARS", "foreign_excerpt", "plain_excerpt"]
