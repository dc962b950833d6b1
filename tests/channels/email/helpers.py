"""Shared helpers of the e-mail tests: the shared data directory and skip-or-fail."""

from __future__ import annotations

import os
import re
from email.message import EmailMessage
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[3]


def shared_dir() -> Path:
    """``../shared`` beside the repository, else $MY_AGENT_SHARED, else /work/shared."""
    candidate = REPO / ".." / "shared"
    if candidate.exists():
        return candidate.resolve()
    return Path(os.environ.get("MY_AGENT_SHARED", "/work/shared"))


def missing(reason: str) -> NoReturn:
    """A missing server or data set: a failure in CI, a skip elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# The key the core deduplicates a mail by: its Message-ID plus a hash of its content.
_DEDUP_KEY = re.compile(r"(<[^<>\s]+>)#sha256:[0-9a-f]{32}")


def mail_id(key: str) -> str:
    """The Message-ID in a delivered mail's dedup key (``<id>#sha256:<content hash>``);
    fails on a key of any other form."""
    found = _DEDUP_KEY.fullmatch(key)
    assert found is not None, f"not a Message-ID plus content hash: {key!r}"
    return found.group(1)


def text_of(mail: EmailMessage) -> str:
    """The text of a mail we sent: its text/plain part (beside it goes the HTML one)."""
    part = mail.get_body(("plain",))
    assert part is not None, f"no text/plain part in {mail.get_content_type()}"
    return str(part.get_content())
