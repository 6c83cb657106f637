"""The root of a proxy process tree: start N ranks with the torch.distributed env, watch them,
and stop them all (launchers.process's TERM, grace, KILL over each rank's tree) as soon as one
fails or the launcher is gone. The root then exits as the failed rank did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from launchers.process import free_port, kill_processes
from launchers.proxy.nodes import meeting, rank_env

STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL for the ranks
SPAWNED_ENV = "SERVETUNE_PROXY_SPAWNED_AT"  # time.time() when the root started the rank


def without_spawn(argv: Sequence[str]) -> list[str]:
    """The rank's argv: the root's without ``--spawn N``."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--spawn":
            skip = True
        elif not word.startswith("--spawn="):
            out.append(word)
    return out


def exit_like(code: int) -> int:
    """Exit as the rank did: re-raise a fatal signal so the exit code keeps it (-9 stays -9)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def _stop(children: Sequence[subprocess.Popen[bytes]]) -> None:
    kill_processes([c.pid for c in children if c.poll() is None], STOP_GRACE)
    for child in children:
        child.wait()


def spawn(n: int, argv: Sequence[str], port: int, nodes: int = 1, node_rank: int = 0,
          addr: str | None = None) -> int:
    """Start ranks 0..n-1 of ``python -m launchers.proxy.worker argv`` (across nodes: this
    node's n ranks of the whole group, meeting at ``addr``); stop them all when one fails.
    Returns the exit code for the root."""
    host, given = meeting(addr)
    port = given or port or free_port()
    rank_argv = [sys.executable, "-m", "launchers.proxy.worker", *without_spawn(argv)]
    children: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, _frame: object) -> None:
        _stop(children)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = os.getppid()
    for rank in range(n):
        env = {**os.environ, **rank_env(rank, n, nodes, node_rank, host, port),
               SPAWNED_ENV: repr(time.time())}
        children.append(subprocess.Popen(rank_argv, env=env, stdin=subprocess.DEVNULL))
    while True:
        codes = [child.poll() for child in children]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:  # the first is not always the cause: its peers fail on the broken link
            how = ", ".join(f"rank {rank} exited with " +
                            (f"signal {-code}" if code < 0 else f"code {code}")
                            for rank, code in failed)
            print(f"proxy: {how}; stopping the other ranks", flush=True)
            _stop(children)
            return exit_like(failed[0][1])
        if all(code == 0 for code in codes):
            return 0
        if os.getppid() != parent:
            print("proxy: the launcher is gone; stopping the ranks", flush=True)
            _stop(children)
            return 1
        time.sleep(0.05)
