"""A local pymap IMAP server for ``bench email`` and the tests (in-memory, demo user),
and a free loopback port for local test servers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

USER = "bot@example.com"
PASSWORD = "bench-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pymap_binary() -> str | None:
    """pymap from this environment (beside the interpreter) or from PATH."""
    binary = Path(sys.executable).with_name("pymap")
    return str(binary) if binary.exists() else shutil.which("pymap")


# Without passlib, pymap hashes the demo password with pysasl's PBKDF2-SHA256 at 500,000
# rounds and hashes again at every LOGIN: ~0.3 s of CPU per login, which made this test
# server the busiest process of the e-mail tests (~60% of a core under test_adapter.py,
# py-spy, session 29). A local server's demo password needs no hashing: the launcher
# keeps it in clear. Everything else is pymap's own ``main()``.
_PYMAP_LAUNCHER = """\
import sys
from pysasl.hashing import Cleartext
from pymap.config import IMAPConfig
IMAPConfig._get_hash_context = classmethod(lambda cls, passlib_cfg: Cleartext())
from pymap.main import main
sys.argv[0] = "pymap"
sys.exit(main())
"""


# pymap's in-memory folders keep the system flags only (PERMANENTFLAGS without "\*"),
# as Exchange does; Dovecot, Cyrus and Gmail keep keywords. ``keywords`` makes them
# keep those named (listed in PERMANENTFLAGS, as a server with a fixed set does).
_PYMAP_KEYWORDS = """\
from pymap.backend.mailbox import MailboxDataInterface
from pymap.parsing.specials.flag import Flag, Recent, get_system_flags
_kept = frozenset(Flag(word.encode()) for word in {keywords!r})
MailboxDataInterface.permanent_flags = property(
    lambda self: (get_system_flags() - {{Recent}}) | _kept
)
"""


def pymap_command(keywords: tuple[str, ...] = ()) -> list[str] | None:
    """The command that starts pymap with its demo password kept in clear (arguments go
    after it), or None when pymap is not installed. ``keywords``: the IMAP keywords its
    folders keep (none by default)."""
    binary = pymap_binary()
    if binary is None:
        return None
    patch = _PYMAP_KEYWORDS.format(keywords=list(keywords)) if keywords else ""
    return [_interpreter_of(Path(binary)), "-c", patch + _PYMAP_LAUNCHER]


def _interpreter_of(script: Path) -> str:
    """The Python a console script runs on (its ``#!`` line), else this one."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return sys.executable
    if first.startswith(b"#!"):
        interpreter = first[2:].strip().decode(errors="replace").split()
        if interpreter and Path(interpreter[0]).name.startswith("python"):
            return interpreter[0]
    return sys.executable


def start_pymap(
    port: int | None = None,
    user: str = USER,
    password: str = PASSWORD,
    tls: tuple[Path, Path] | None = None,
    keywords: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], int]:
    """A local pymap IMAP server (in-memory, demo user); used by this bench and the tests.
    ``tls``: (certificate, key) to serve IMAPS with, else plain IMAP; ``keywords``: the
    IMAP keywords its folders keep (none by default, as pymap).

    Raises RuntimeError when pymap is missing or does not come up.
    """
    command = pymap_command(keywords)
    if command is None:
        raise RuntimeError("pymap is not installed (pip install my-agent[test])")
    port = port or free_port()
    proc = subprocess.Popen(
        [
            *command,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *(["--cert", str(tls[0]), "--key", str(tls[1])] if tls else ["--no-tls"]),
            "dict",
            "--demo-user",
            user,
            "--demo-password",
            password,
        ],
        env={**os.environ, "FQDN": "localhost"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("pymap did not start")
