"""How our mail writes the Message-IDs a reply threads under (In-Reply-To, References).

The email package folds those headers as free text: a word longer than what is left of
a line, an id of 70 characters and more after ``In-Reply-To:`` (Outlook's
``<DM6PR12MB...@DM6PR12MB....namprd12.prod.outlook.com>`` and Gmail's ids often are),
is written as RFC 2047 encoded words (``=?utf-8?q?=3CCAH...?=``). That matches no
Message-ID: no client threaded the reply, and the owner's answer to it named an id the
core had never recorded. :data:`MAIL_POLICY` folds them between two ids, never inside
one (RFC 5322 allows a line of up to 998 characters for an id that long).
"""

from __future__ import annotations

from email.policy import EmailPolicy
from typing import Any

_ID_LISTS = frozenset({"in-reply-to", "references"})


class ThreadingPolicy(EmailPolicy):
    """``email.policy.SMTP``, with In-Reply-To and References folded between their ids."""

    def fold(self, name: str, value: Any) -> str:
        return self._fold_ids(name, value) or super().fold(name, value)

    def fold_binary(self, name: str, value: Any) -> bytes:
        folded = self._fold_ids(name, value)
        if folded is None:
            return super().fold_binary(name, value)
        return folded.encode("utf-8" if self.utf8 else "ascii")

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
