"""``python -m llmservice_dev.simrunner._child ARGS``: ``llmservice sim ARGS`` that dies with
the runner (Linux ``PR_SET_PDEATHSIG``), so a killed runner leaves no simulator holding a pod IP.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
PARENT_ENV = "LLMSERVICE_SIMRUNNER_PID"


def main() -> int:
    parent = int(os.environ.pop(PARENT_ENV, "0") or 0)
    # Not Linux: no PDEATHSIG, but the runner's own shutdown still stops us.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent and os.getppid() != parent:  # the runner died before prctl took effect
        return 0
    from llmservice_operator.cli import main as cli_main

    return cli_main(["sim", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
