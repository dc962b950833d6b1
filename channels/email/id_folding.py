"""How our mail writes the Message-IDs a reply threads under (In-Reply-To, References).

The email package folds those headers as free text: a word longer than what is left of
a line, an id of 70 characters and more after ``In-Reply-To:`` (Outlook's
``<DM6PR12MB...@DM6PR12MB....namprd12.prod.outlook.com>`` and Gmail's ids often are),
is written as RFC 2047 encoded words (``=?utf-8?q?=3CCAH...?=``). That matches no
Message-ID: no client threaded the reply, and the owner's answer to it named an id the
core had never recorded. :data:`MAIL_POLICY` folds them between two ids, never inside
one (RFC 5322 allows a line of up to 998 characters for an id that long).

It also writes a non-ASCII subject (and Outlook's ``Thread-Topic``, the same words) as
encoded words of its own when the mail goes without SMTPUTF8: the email package's
folding put a space between two encoded words, where RFC 2047 says it is no part of the
text, and every client read "bestätigt 確認Überweisung" (session 41, found when long
subjects were cut to 200 characters, which fold in several lines).
"""

from __future__ import annotations

import base64
from email.policy import EmailPolicy
from typing import Any

_ID_LISTS = frozenset({"in-reply-to", "references"})
_TEXTS = frozenset({"subject", "thread-topic"})
# The UTF-8 bytes one encoded word carries: "=?utf-8?b?" + 48 characters of base64 + "?="
# is 60, a line of 74 after "Thread-Topic: " (RFC 2047: 76 at most with encoded words).
_WORD_BYTES = 36


class ThreadingPolicy(EmailPolicy):
    """``email.policy.SMTP``, with In-Reply-To and References folded between their ids,
    and a non-ASCII subject written without SMTPUTF8 as encoded words of its own."""

    def fold(self, name: str, value: Any) -> str:
        folded = self._fold_ids(name, value) or self._fold_text(name, value)
        return folded or super().fold(name, value)

    def fold_binary(self, name: str, value: Any) -> bytes:
        folded = self._fold_ids(name, value) or self._fold_text(name, value)
        if folded is None:
            return super().fold_binary(name, value)
        return folded.encode("utf-8" if self.utf8 else "ascii")

    def _fold_text(self, name: str, value: Any) -> str | None:
        """A non-ASCII subject without SMTPUTF8: base64 encoded words, one a line, every
        space inside one (adjacent encoded words are read as one text, RFC 2047
        section 6.2), none split inside a character."""
        text = str(value)
        if name.lower() not in _TEXTS or text.isascii() or self.utf8:
            return None
        words: list[bytes] = [b""]
        for char in text:
            data = char.encode("utf-8", "replace")
            if words[-1] and len(words[-1]) + len(data) > _WORD_BYTES:
                words.append(b"")
            words[-1] += data
        encoded = [f"=?utf-8?b?{base64.b64encode(word).decode()}?=" for word in words]
        return f"{name}: " + f"{self.linesep} ".join(encoded) + self.linesep

    def _fold_ids(self, name: str, value: Any) -> str | None:
        text = str(value)
        # A non-ASCII id (RFC 6532) goes out as it is with SMTPUTF8 only; without it the
        # sender leaves such ids out first (channels.email.smtputf8).
        if name.lower() not in _ID_LISTS or not (text.isascii() or self.utf8):
            return None
        limit = self.max_line_length or 78
        lines = [f"{name}:"]
        for word in text.split():
            if lines[-1] != f"{name}:" and len(lines[-1]) + 1 + len(word) > limit:
                lines.append("")
            lines[-1] += f" {word}"
        return self.linesep.join(lines) + self.linesep


MAIL_POLICY = ThreadingPolicy(linesep="\r\n")
