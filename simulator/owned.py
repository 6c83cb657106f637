"""``python -m simulator.owned PARENT MODULE ARG...``: ``python -m MODULE ARG...`` in this
process, told by Linux to get SIGTERM when PARENT (the process that started it) dies.

The tests and benchmarks start ``servetune`` drivers through this (simulator/runs.py): a
caller that goes without stopping them (a pytest worker or a benchmark killed) would leave
them running their campaigns, and their servers after them once they too are killed. SIGTERM
is servetune's own stop: the driver ends its trials' servers and its Ray. The signal is tied
to the thread that started this process; the harness starts drivers from its main thread.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def tie_to(parent: int) -> None:
    """SIGTERM here when ``parent`` dies; at once if it is already gone (this process was
    handed to another parent before the tie was made)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    parent, module, *args = sys.argv[1:]
    tie_to(int(parent))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
