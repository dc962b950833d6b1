"""The model's naming answer read defensively (bot.lifecycle.naming): a JSON object in
chatter or code fences, or nearly JSON (a trailing comma, single quotes, cut short)."""

from __future__ import annotations

import json
import re
from typing import Any

_OPEN_BRACE = re.compile(r"\{")
# Fields of an answer that is not valid JSON (salvage_naming).
_QUOTED = re.compile(r"""(["'])((?:(?!\1)[^\\\n]|\\.)+)\1""")
_TITLE_FIELD = re.compile(r"""["']title["']\s*:\s*(["'])((?:(?!\1)[^\\\n]|\\.)+)\1""")
_TOPICS_FIELD = re.compile(r"""["']topics["']\s*:\s*\[([^\]]*)""")
_SPLIT_FIELD = re.compile(r"""["']suggestSplit["']\s*:\s*(true|false)""", re.I)


def parse_naming(text: str) -> dict[str, Any] | None:
    """The JSON object in a model's answer (code fences and chatter tolerated), or None.

    Each ``{`` is tried in turn and the first object with a ``title`` wins (else the
    first object): one greedy match from the first ``{`` to the last ``}`` swallowed any
    braces in prose after the object ("I kept {boiler} as the theme"), the whole answer
    stopped being JSON, and a good title was replaced by the offline one.
    """
    text = text or ""
    decoder = json.JSONDecoder()
    first: dict[str, Any] | None = None
    for match in _OPEN_BRACE.finditer(text):
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(data, dict):
            if "title" in data:
                return data
            first = first if first is not None else data
    return first


def salvage_naming(text: str) -> dict[str, Any] | None:
    """The fields of an answer that is almost JSON (a trailing comma, single quotes, an
    object cut short), or None without a ``title`` field: its title was thrown away for
    the offline keywords, and the model asked again after a backoff."""
    found = _TITLE_FIELD.search(text or "")
    if found is None:
        return None
    data: dict[str, Any] = {"title": _unescape(found.group(2))}
    topics = _TOPICS_FIELD.search(text)
    if topics is not None:
        data["topics"] = [_unescape(m.group(2)) for m in _QUOTED.finditer(topics.group(1))]
    split = _SPLIT_FIELD.search(text)
    if split is not None:
        data["suggestSplit"] = split.group(1).lower() == "true"
    return data


def strings(raw: Any) -> list[str]:
    """The topics of an answer as a list of strings (a string of them split)."""
    if isinstance(raw, str):
        return re.split(r"[,;\n]", raw)
    return [str(t) for t in raw if isinstance(t, str)] if isinstance(raw, list) else []


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def as_bool(value: Any) -> bool:
    """A JSON flag the model may write as a string ("true") or a number."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value) if isinstance(value, bool | int) else False
