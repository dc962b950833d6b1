"""Brains: the offline stand-in and (when a key is configured) Claude."""

from bot.brain.base import (
    Brain,
    BrainAccessRefused,
    BrainReply,
    BrainRequest,
    BrainUnavailable,
    DeltaSink,
    ForeignAnswer,
    HistoryTurn,
    Usage,
    UtilityModel,
)

__all__ = [
    "Brain",
    "BrainAccessRefused",
    "BrainReply",
    "BrainRequest",
    "BrainUnavailable",
    "DeltaSink",
    "ForeignAnswer",
    "HistoryTurn",
    "Usage",
    "UtilityModel",
]
