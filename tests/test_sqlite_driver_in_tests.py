"""Tests open the product's databases with the product's SQLite (tests/sqlite_driver.py).

Regression: tests read ``state.db`` with the standard ``sqlite3`` while the daemon, in
the same process, used ``pysqlite3``: two copies of SQLite on one file, whose locks and
WAL-index mappings do not see each other, and the daemon's writer thread died of SIGBUS.
"""

from __future__ import annotations

import re
from pathlib import Path

from bot.sqlite_conn import select_driver
from tests.sqlite_driver import sqlite3

TESTS = Path(__file__).parent
STANDARD = re.compile(r"^\s*(import sqlite3\s*$|from sqlite3 import)", re.M)


def test_no_test_imports_the_standard_sqlite3_module() -> None:
    offenders = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "sqlite_driver.py" and STANDARD.search(path.read_text())
    ]
    assert offenders == [], f"use `from tests.sqlite_driver import sqlite3` in {offenders}"


def test_the_tests_module_is_the_products_driver() -> None:
    assert sqlite3 is select_driver().module
