"""Prompt caching the way the Messages API counts it, for the fake API
(``FakeAnthropicAPI(prompt_cache=True)``).

A request is a sequence of blocks: its tools, its system blocks, then each message's
content blocks. A ``cache_control`` breakpoint writes the prefix up to and including its
block; a later request reads the longest prefix written before that ends at one of its
breakpoints or at one of the 20 blocks before one. Of a request's input, the read prefix
is ``cache_read_input_tokens``, the rest up to its last breakpoint
``cache_creation_input_tokens``, and what follows ``input_tokens``. The API's minimum
cacheable length (1,024 tokens and more) and the five-minute lifetime are left out.

A breakpoint the API refuses (more than four, on a thinking block, on an empty text
block) makes :meth:`PromptCache.problem` say why; the fake answers it with a 400.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20  # blocks the API checks before a breakpoint for an earlier entry
MAX_BREAKPOINTS = 4
NO_BREAKPOINT = frozenset({"thinking", "redacted_thinking"})


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request as one sequence of blocks, in the order the API caches them."""
    blocks = [dict(tool, type="tool") for tool in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(system)
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks.extend(dict(b, role=message.get("role")) for b in content or [])
    return blocks


def _tokens(block: dict[str, Any]) -> int:
    return max(1, len(json.dumps(block, ensure_ascii=False)) // 4)


@dataclass
class PromptCache:
    """The prefixes written so far (by their hash)."""

    written: set[str] = field(default_factory=set)

    def problem(self, body: dict[str, Any]) -> str | None:
        """Why the API would refuse the breakpoints of ``body``, or None."""
        marked = [b for b in _blocks(body) if "cache_control" in b]
        if len(marked) > MAX_BREAKPOINTS:
            return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
        for block in marked:
            if block.get("type") in NO_BREAKPOINT:
                return f"cache_control cannot be set on a {block['type']} block"
            if block.get("type") == "text" and not block.get("text"):
                return "cache_control cannot be set for empty text blocks"
        return None

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """``input_tokens`` and the cache's counts for ``body``; writes its prefixes."""
        blocks = _blocks(body)
        keys, sizes, digest = [], [], hashlib.sha256()
        for block in blocks:
            # a breakpoint is no part of the prefix, nor of its size
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps(plain, sort_keys=True).encode())
            keys.append(digest.copy().hexdigest())
            sizes.append(_tokens(plain))
        marks = [n for n, b in enumerate(blocks) if "cache_control" in b]
        read_end = -1  # the last block of the longest prefix read
        for mark in marks:
            for n in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if keys[n] in self.written:
                    read_end = max(read_end, n)
                    break
        write_end = max(marks, default=-1)
        self.written.update(keys[n] for n in marks)
        read = sum(sizes[: read_end + 1])
        write = sum(sizes[read_end + 1 : write_end + 1])
        return {
            "input_tokens": max(1, sum(sizes) - read - write),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }


__all__ = ["LOOKBACK", "MAX_BREAKPOINTS", "PromptCache"]
