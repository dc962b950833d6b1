"""What the Messages API refuses in a request's messages, as the fake refuses it.

The API answers 400 ``invalid_request_error`` to a message whose content is empty and
to a text block that is empty or only whitespace. The fake accepted both, so a request
the API would refuse passed every test: a known contact's blank mail went to the model
as ``{"role": "user", "content": ""}`` and the contact got no answer in production.
"""

from __future__ import annotations

from typing import Any


def content_problem(body: dict[str, Any]) -> str | None:
    """The API's error message for the first empty message or text block of ``body``,
    or None when it has none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    last = len(messages) - 1
    for n, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        # An empty final assistant message is a prefill the API allows.
        prefill = n == last and message.get("role") == "assistant"
        if content in ("", []) and not prefill:
            return (
                f"messages.{n}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks if isinstance(blocks, list) else ():
            if not isinstance(block, dict) or block.get("type") != "text":
                continue
            text = block.get("text")
            if text == "" and not prefill:
                return "messages: text content blocks must be non-empty"
            if isinstance(text, str) and text and not text.strip():
                return "messages: text content blocks must contain non-whitespace text"
    return None
