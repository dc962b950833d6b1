"""Brains: the offline stand-in and (when a key is configured) Claude."""

from bot.brain.base import (
    Brain,
    BrainReply,
    BrainRequest,
    BrainUnavailable,
    DeltaSink,
    HistoryTurn,
    Usage,
    UtilityModel,
)

__all__ = [
    "Brain",
    "BrainReply",
    "BrainRequest",
    "BrainUnavailable",
    "DeltaSink",
    "HistoryTurn",
    "Usage",
    "UtilityModel",
]
