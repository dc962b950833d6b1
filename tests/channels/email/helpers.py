"""Shared helpers of the e-mail tests: the shared data directory and skip-or-fail."""

from __future__ import annotations

import os
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
