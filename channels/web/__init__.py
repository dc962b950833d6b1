"""The web dashboard channel (aiohttp): chat, every conversation, search, externals, analytics."""

from channels.web.server import WebChannel

__all__ = ["WebChannel"]
