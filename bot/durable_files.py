"""Replacing a small file durably: the whole new content or the old, never a part.

What the owner would lose if it were torn (a rescued transcript's copy, the loopback
channel's record of what it sent) is written to a temporary file beside it, synced,
renamed over it, and the directory synced so that the rename survives a power cut.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace_durably(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Make ``path`` hold ``data``: a temporary ``.<name>.tmp`` beside it (``mode``;
    0600 by default, the owner's words) written and fsynced, renamed over ``path``, the
    directory fsynced. On an error the temporary file is removed and the error raised:
    ``path`` is as it was."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
