"""A stand-in server that starts only once a second trial's server has started: overlap in a
run's records then shows that servetune ran two trials at once, whatever the machine's load.

Without it the trials' own length carried the claim: a second node's trial actor needs a fresh
Ray worker there, and Ray Tune hands the first trial's actor to the next trial whenever that
one ends first, so on a loaded box (four pytest workers beside two busy loops) every trial ran
on the first node, one after another."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from simulator.runs import FAST

# Each trial's server (its node 0 in a trial across nodes) notes itself in the gate folder,
# then waits until two have, or until the wait is over: the first trial cannot be ready, let
# alone end, before a second trial's server has started.
PAIR_GATE = """\
import os, sys, time
from pathlib import Path
from simulator import sglang_server
argv, gate = sys.argv[1:], Path({gate!r})
if "--node-rank" not in argv or argv[argv.index("--node-rank") + 1] == "0":
    (gate / f"node0.{{os.getpid()}}").touch()
    deadline = time.monotonic() + {wait!r}
    while len(list(gate.glob("node0.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
sys.exit(sglang_server.main(argv))
"""
# A safety net, never a verdict: a run that takes one trial at a time waits it out once.
PAIR_WAIT_S = 150.0


def paired_server(gate: Path, *switches: str) -> str:
    """A --server-cmd: the stand-in (short rounds, ``switches``) behind the pair gate."""
    gate.mkdir(parents=True, exist_ok=True)
    code = PAIR_GATE.format(gate=str(gate), wait=PAIR_WAIT_S)
    return shlex.join([sys.executable, "-c", code, *FAST, *switches])
