"""The e-mail channel: IMAP in (IDLE with a polling fallback), threaded SMTP replies out.

:class:`channels.email.adapter.EmailChannel` is the adapter; the modules beside it are
pure functions (parsing, quote stripping, authentication verdicts, composing) that the
adapter and the tests use directly.
"""

from channels.email.adapter import EmailChannel

__all__ = ["EmailChannel"]
