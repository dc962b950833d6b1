"""Telegram channel (aiogram 3): long polling with a durable offset, safe HTML replies.

``from channels.telegram import TelegramChannel`` imports aiogram (several seconds of
CPU), so the name is resolved lazily and only when the channel is enabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from channels.telegram.adapter import TelegramChannel

__all__ = ["TelegramChannel"]


def __getattr__(name: str) -> Any:
    if name == "TelegramChannel":
        from channels.telegram.adapter import TelegramChannel

        return TelegramChannel
    raise AttributeError(name)
