"""Run the daemon with known contacts answered offline: ``python -m
tests.ops.answering_daemon run --config F`` is ``my-agent run`` whose offline brain is
:class:`tests.known_answered.KnownAnswered` (the stand-in for a model's answers to known
contacts). :class:`tests.ops.daemon.DaemonProcess` starts it with
``answering_known=True``; no config reaches it.
"""

from __future__ import annotations

import sys


def main() -> int:
    from bot import services
    from tests.known_answered import answering_brain

    services.build_brain = answering_brain
    from bot.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
