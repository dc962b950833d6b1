"""A file replaced durably holds the whole new content or the old (bot/durable_files.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bot.durable_files import replace_durably


def test_the_new_content_replaces_the_old_private_to_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "sent.jsonl"
    path.write_bytes(b"old\n")
    replace_durably(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["sent.jsonl"]  # no temporary left


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sent.jsonl"
    path.write_bytes(b"old\n")

    def refused(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError):
        replace_durably(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sent.jsonl"]
