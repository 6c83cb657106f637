"""simulator/owned.py: a module run through it gets SIGTERM when the process that started it
dies, as the drivers the harness starts do when a test worker or a benchmark is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil

from simulator.runs import ROOT

# The caller: starts a long `python -m timeit` through simulator.owned, prints its pid, waits.
CALLER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-m", "simulator.owned", str(os.getpid()), "timeit",
                          "-n", "1", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_killed_caller_takes_what_it_started_down() -> None:
    caller = subprocess.Popen([sys.executable, "-c", CALLER], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    assert caller.stdout is not None
    child = psutil.Process(int(caller.stdout.readline()))
    try:
        # tied: it runs the module (past the wrapper's first lines) before the caller goes
        deadline = time.monotonic() + 60
        while "timeit" not in " ".join(child.cmdline()) and time.monotonic() < deadline:
            time.sleep(0.05)
        caller.kill()  # SIGKILL: nothing of the caller's own runs
        caller.wait()
        # Untied, the child would sleep on for 120 s and this wait would raise (60 s: a
        # safety net for a loaded box, not the verdict).
        child.wait(timeout=60)
    finally:
        caller.kill()
        if child.is_running():
            child.kill()


def test_a_caller_already_gone_stops_it_at_once() -> None:
    """The tie is made after the start: a parent that died in between is noticed."""
    done = subprocess.run([sys.executable, "-m", "simulator.owned", "1", "timeit", "-n", "1",
                           "import time; time.sleep(120)"], cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGTERM
