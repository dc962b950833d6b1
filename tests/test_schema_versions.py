"""Every schema version as it shipped: a migration on main is never edited again.

A store that ran a migration never runs it again (its number is past the store's
``user_version``): a migration edited or renumbered once a commit of main had it left
the stores of that commit with another schema than a fresh one, for good (titles.manual,
the party-time indexes: bot/schema_repair.py, migration 14 of session 39). So the schema
each version gives is frozen in ``tests/schema_versions/*.json`` (a digest of its
tables' columns and its indexes' and triggers' SQL), and today's migrations must still
give it. A new migration adds its version to the file:
``python -m tests.test_schema_versions`` writes the versions missing there (and never
changes one that is there: a change to a shipped migration is a new migration).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.db import apply_migrations, connect_sync
from bot.schema import INDEX_MIGRATIONS, STATE_MIGRATIONS
from bot.sqlite_conn import Migration

FROZEN = Path(__file__).parent / "schema_versions"
DATABASES: dict[str, list[Migration]] = {"index": INDEX_MIGRATIONS, "state": STATE_MIGRATIONS}


def shape(conn: Any) -> dict[str, Any]:
    """Every table's columns (name, type, not null, default, key) and every index's,
    trigger's and view's SQL, whitespace folded: the schema, not its comments."""
    found: dict[str, Any] = {}
    for kind, name, sql in conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql NOT NULL ORDER BY name"
    ).fetchall():
        if kind == "table":
            found[name] = [list(c[1:]) for c in conn.execute(f"PRAGMA table_info({name})")]
        else:
            found[name] = " ".join(str(sql).split())
    return found


def digest_at(tmp: Path, name: str, version: int) -> str:
    """The digest of database ``name``'s schema at ``version``, made by today's code."""
    migrations = DATABASES[name]
    conn = connect_sync(tmp / f"{name}-v{version}.db")
    try:
        apply_migrations(conn, migrations[:version])
        canonical = json.dumps(shape(conn), sort_keys=True, separators=(",", ":"))
    finally:
        conn.close()
    return hashlib.sha256(canonical.encode()).hexdigest()


def frozen(name: str) -> dict[str, Any]:
    path = FROZEN / f"{name}.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


@pytest.mark.parametrize("name", sorted(DATABASES))
def test_every_shipped_schema_version_is_still_made_as_it_was(name: str, tmp_path: Path) -> None:
    migrations = DATABASES[name]
    versions = frozen(name)
    missing = [v for v in range(1, len(migrations) + 1) if str(v) not in versions]
    assert not missing, (
        f"{name} schema version(s) {missing} not frozen: run `python -m "
        "tests.test_schema_versions` and commit tests/schema_versions/"
    )
    for version in range(1, len(migrations) + 1):
        assert digest_at(tmp_path, name, version) == versions[str(version)], (
            f"migration {version} of {name} gives another schema than it shipped with: "
            "never edit a shipped migration, add a new one"
        )


def _write_missing() -> None:
    import tempfile

    FROZEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, migrations in DATABASES.items():
            versions = frozen(name)
            for version in range(1, len(migrations) + 1):
                if str(version) not in versions:
                    versions[str(version)] = digest_at(Path(tmp), name, version)
                    print(f"{name}: version {version} frozen")
            text = json.dumps(versions, indent=1, sort_keys=True) + "\n"
            (FROZEN / f"{name}.json").write_text(text)


if __name__ == "__main__":
    _write_missing()
    sys.exit(0)
