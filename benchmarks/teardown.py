"""Teardown: from stop to every process of the server gone and its port free.

The stand-in is started the way a trial starts it (plan -> start: the server and its rank
processes, all marked), waited for, sent one request, and stopped. The clock stops once every
process of the tree (and every process with the trial's marker) is gone and the port binds
again.

Three stops: the sglang workload's own (``Running.stop``: the whole tree killed at once, as
SGLang's own stop ends, of a server that would ignore SIGTERM), and the process layer's that
every reap of leftovers uses (SIGTERM to the tree, ``grace`` seconds, SIGKILL) of a
cooperative server and of one that ignores SIGTERM (``--fake-fault ignore-sigterm``: the server
and its ranks), which must be SIGKILLed after the grace.

    python -m benchmarks.teardown [--launches 5] [--grace 2] [--profile]

``--profile`` also prints cProfile's top entries for the stop of one SIGTERM-ignoring server.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks._common import machine, median, spread, start_stand_in, with_root_on_path
from launchers import process

SGLANG_SLEEP_S = 5.0  # SGLang's speculative sweep sleeps this long after each kill (issue 6)


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def teardown_once(folder: Path, trial_id: str, grace: float, server_args: list[str],
                  profiler: cProfile.Profile | None = None, kill: bool = False
                  ) -> tuple[float, int]:
    """Seconds from stop to all gone and the port free, and how many processes there were.
    ``kill``: the sglang workload's stop (the tree killed at once); else the process layer's
    (SIGTERM, the grace, SIGKILL), which every reap of leftovers uses."""
    running: Any = start_stand_in(folder, trial_id, server_args)
    proc = running.process
    try:
        running.wait_ready(60.0)
        running.bench.warmup(1)
        tree = _tree(proc.pid)
        proc.stop_grace = grace
    except BaseException:
        running.stop()
        raise
    start = time.monotonic()
    stop = running.stop if kill else proc.stop
    if profiler is not None:
        profiler.runcall(stop)
    else:
        stop()
    while _alive(tree) or process.marked_processes(proc.marker, exact=True) or \
            not process.port_is_free(proc.port, proc.host):
        if time.monotonic() - start > grace + 30:
            raise RuntimeError(f"{trial_id}: still alive 30 s after the grace")
        time.sleep(0.005)
    return time.monotonic() - start, len(tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--grace", type=float, default=2.0,
                        help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the stop of one SIGTERM-ignoring server")
    args = parser.parse_args(argv)
    with_root_on_path()
    print(machine())
    folder = Path(tempfile.mkdtemp(prefix="st-teardown-"))
    results: dict[str, list[float]] = {}
    try:
        for label, extra, kill in (
                ("killed at once", ["--fake-fault", "ignore-sigterm"], True),
                ("cooperative", [], False),
                ("ignores SIGTERM", ["--fake-fault", "ignore-sigterm"], False)):
            times, sizes = [], []
            for i in range(args.launches):
                seconds, size = teardown_once(folder, f"{label[:4]}{i:03d}", args.grace, extra,
                                              kill=kill)
                times.append(seconds)
                sizes.append(size)
            results[label] = times
            print(f"{label:<16} ({max(sizes)} processes, grace {args.grace:g} s): "
                  f"{spread(times)}")
        if args.profile:
            profiler = cProfile.Profile()
            seconds, _ = teardown_once(folder, "prof", args.grace,
                                       ["--fake-fault", "ignore-sigterm"], profiler)
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(12)
            print(f"cProfile of Running.stop, SIGTERM ignored ({seconds:.3f} s to all gone):")
            print(out.getvalue())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    coop, stubborn = median(results["cooperative"]), median(results["ignores SIGTERM"])
    print(f"sglang stop: {median(results['killed at once']):.2f} s killing the tree at once")
    print(f"goals: cooperative <= 3 s, SIGTERM ignored <= grace + 1 = {args.grace + 1:g} s; "
          f"SGLang's speculative sweep: kill, then sleep {SGLANG_SLEEP_S:g} s (quoted, not run)")
    print(f"teardown: {coop:.2f} s cooperative, {stubborn:.2f} s ignoring SIGTERM with grace "
          f"{args.grace:g} s ({SGLANG_SLEEP_S / coop:.0f}x faster than a kill + "
          f"{SGLANG_SLEEP_S:g} s sleep)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
