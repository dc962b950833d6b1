"""tests/ops/zygote.py: a forked daemon child is ``python -m MODULE`` in all a test sees:
its arguments, environment, working directory and log, and its exit status reported as
``asyncio`` reports a child's (negative for a signal)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.ops.zygote import zygote

PROBE = "tests.test_zygote"  # this file, run as __main__ in the child (bottom)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


async def test_a_forked_child_runs_the_module_as_main_with_its_own_env_cwd_and_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "child.log"
    log.write_text("left from an earlier run\n")
    proc = await zygote(_env()).spawn(
        PROBE, ["7"], cwd=tmp_path, env=_env(PROBE_WORD="kayak"), log=log, preload=["json"]
    )
    assert await proc.wait() == 7
    assert proc.returncode == 7
    assert log.read_text().splitlines() == [
        "argv ['7']",
        f"cwd {tmp_path}",
        "word kayak",
        "stdin ''",
    ]


async def test_a_killed_child_reports_the_signal(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    proc = await zygote(_env()).spawn(
        PROBE, ["wait"], cwd=tmp_path, env=_env(), log=log, preload=[]
    )
    assert proc.returncode is None
    proc.kill()
    assert await proc.wait() == -signal.SIGKILL
    proc.kill()  # an ended child: nothing to signal, no error


if __name__ == "__main__":
    print(f"argv {sys.argv[1:]}")
    if sys.argv[1] == "wait":
        signal.pause()
    print(f"cwd {os.getcwd()}")
    print(f"word {os.environ.get('PROBE_WORD')}")
    print(f"stdin {sys.stdin.read()!r}")
    sys.exit(int(sys.argv[1]))
