"""``conversations.db``'s files on disk as ``my-agent reindex`` moves them.

The index is the database file and its WAL (which holds its latest pages) and
shared-memory files. A reindex sets the old index aside (:func:`set_index_aside`) until
the rebuild completes, deletes it then (:func:`delete_index`), and puts it back over a
half-built one when the rebuild fails (:func:`restore_index`): before session 40 the
index was deleted first, and a failed rebuild left none. Nothing may have the index
open while its files move. (Start-up's rescue of a corrupt index is
:mod:`bot.index_rescue`.)
"""

from __future__ import annotations

import os
from pathlib import Path


def delete_index(path: Path) -> None:
    """Remove conversations.db and its WAL files (``my-agent reindex``)."""
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def aside_path(path: Path) -> Path:
    """Where ``my-agent reindex`` keeps the old index while it rebuilds."""
    return path.with_name(path.name + ".before-reindex")


def set_index_aside(path: Path) -> Path:
    """Move conversations.db (and its WAL, which holds its latest pages) to
    :func:`aside_path`, replacing an older one a killed reindex left; the shared-memory
    file goes (SQLite rebuilds it from the WAL). Nothing may have the index open."""
    aside = aside_path(path)
    delete_index(aside)
    _move_index(path, aside)
    return aside


def restore_index(path: Path, aside: Path) -> None:
    """Put the index :func:`set_index_aside` moved back, over a half-built one."""
    if not aside.exists():
        return  # there was no index to keep (a first build)
    delete_index(path)
    _move_index(aside, path)


def _move_index(source: Path, target: Path) -> None:
    """``source`` and its WAL renamed to ``target``'s names; its -shm removed."""
    for suffix in ("", "-wal"):
        try:
            os.replace(f"{source}{suffix}", f"{target}{suffix}")
        except FileNotFoundError:
            pass
    try:
        os.remove(f"{source}-shm")
    except FileNotFoundError:
        pass
