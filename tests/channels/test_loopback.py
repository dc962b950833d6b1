"""The loopback channel's own record of what it sent (``loopback-sent.jsonl``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from channels import loopback


def test_a_short_write_leaves_the_record_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: on a full disk a short os.write counted as sent; the torn record
    # swallowed the next one ({"ref": "loo{"ref": ...) and both sends were lost.
    path = tmp_path / "sent.jsonl"
    loopback._append_durably(str(path), b'{"ref": "first"}\n')
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:5]))  # part of it, as a full disk does
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loopback.os, "write", short_then_full)
    with pytest.raises(OSError, match="No space"):
        loopback._append_durably(str(path), b'{"ref": "second"}\n')
    monkeypatch.setattr(loopback.os, "write", real_write)
    assert path.read_bytes() == b'{"ref": "first"}\n'  # no torn record
    loopback._append_durably(str(path), b'{"ref": "second"}\n')
    assert path.read_bytes().splitlines() == [b'{"ref": "first"}', b'{"ref": "second"}']
