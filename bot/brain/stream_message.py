"""The message of one streamed Messages API answer, built from its raw events, with a tool
call's input read once its block is complete.

The SDK's own ``messages.stream()`` parses a tool call's input at every
``input_json_delta`` and raises on input that is not JSON ("Unable to parse tool parameter
JSON from model. Please retry your request"), losing the whole answer: the reply was
asked for again as a whole, up to three times, then failed, and the model never learnt
what it had done wrong. Here such a call keeps an empty input and carries the problem
(:func:`input_problem`): the tool loop answers it with an error result naming it, within
the same reply (bot.brain.tool_round).
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import AsyncIterator
from typing import Any

# The SDK's own accumulation of every other event (a private module: the SDK is pinned
# below 3, and its older versions kept the JSON buffers on the blocks, not in a dict).
from anthropic.lib.streaming._messages import accumulate_event

# The attribute of a tool_use block whose input could not be read: why (as_params sends
# only the API's own fields back, so it never reaches the API).
PROBLEM = "input_problem"
RAW_SHOWN = 200  # characters of unreadable input quoted back to the model
# input_json_delta never reaches accumulate_event here, so its buffers stay empty
_JSON_BUFS: dict[str, Any] = (
    {"json_bufs": {}} if "json_bufs" in inspect.signature(accumulate_event).parameters else {}
)


def input_problem(block: Any) -> str | None:
    """Why the input of the ``tool_use`` ``block`` could not be read (None: it could)."""
    problem = getattr(block, PROBLEM, None)
    return problem if isinstance(problem, str) else None


def _read_input(raw: str) -> tuple[Any, str | None]:
    """The input of a tool call from its JSON text, and the problem with it (None: none)."""
    if not raw.strip():
        return {}, None  # a call without arguments streams no JSON at all
    try:
        # NaN, Infinity and 1e999 (a float past range) are read by json.loads but cannot
        # be written back: the next request, which repeats the call, failed to serialise
        # and the whole reply ended in an apology (session 38). Refused like bad JSON.
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as exc:
        shown = raw if len(raw) <= RAW_SHOWN else raw[:RAW_SHOWN] + "…"
        return {}, f"its input is not valid JSON ({exc}): {shown}"
    if not isinstance(value, dict):
        return {}, f"its input must be a JSON object, not {type(value).__name__}"
    return value, None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _partial(raw: str) -> dict[str, Any]:
    """What can be read of unreadable input (a call cut while it was written reads
    ``{"query": "boi``: ``{"query": "boi"}``, as the SDK read it); else nothing."""
    from jiter import from_json

    try:
        value = from_json(raw.encode(), partial_mode=True)
        json.dumps(value, allow_nan=False)  # it goes back in the next request: 1e999 (inf) cannot
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class StreamedMessage:
    """Iterates a raw event stream (``messages.create(stream=True)``) and accumulates its
    message (:attr:`current_message_snapshot`; complete after ``message_stop``)."""

    def __init__(self, events: Any) -> None:
        self._events = events
        self._snapshot: Any = None
        self._json: dict[int, str] = {}  # block index -> tool input JSON so far

    @property
    def current_message_snapshot(self) -> Any:
        if self._snapshot is None:
            raise LookupError("no message_start yet")
        return self._snapshot

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for event in self._events:
            kind = event.type
            if kind == "content_block_delta" and event.delta.type == "input_json_delta":
                self._json[event.index] = self._json.get(event.index, "") + (
                    event.delta.partial_json
                )
                yield event
                continue
            if self._snapshot is not None or kind == "message_start":
                self._snapshot = accumulate_event(
                    event=event, current_snapshot=self._snapshot, **_JSON_BUFS
                )
            if kind == "content_block_stop" and event.index in self._json:
                self._close_input(event.index, self._json.pop(event.index))
            elif kind == "message_stop":  # a block never closed (a cut answer)
                for index in list(self._json):
                    self._close_input(index, self._json.pop(index))
            yield event

    def _close_input(self, index: int, raw: str) -> None:
        block = self._snapshot.content[index] if self._snapshot is not None else None
        if block is None or block.type != "tool_use":
            return
        value, problem = _read_input(raw)
        if problem is not None:
            # a call cut at max_tokens reads as unreadable too, and is answered as cut
            # (bot.brain.tool_round.cut_call): it keeps what could be read of it
            value = _partial(raw)
            setattr(block, PROBLEM, problem)
        block.input = value


__all__ = ["PROBLEM", "StreamedMessage", "input_problem"]
