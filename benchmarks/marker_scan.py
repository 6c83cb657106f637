"""The marker scan: finding servetune's processes by ``SERVETUNE_TRIAL`` in their environment.

A trial scans every process on the node about three times (the reap before it, its stop,
the reap after it), so the scan's cost grows with the node's process count. This times
``launchers.process.marked_processes`` against the scan it replaced (a psutil object and a
parsed environment for every process), with the processes already here and then with
``--extra`` idle processes added (a busy GPU node runs hundreds).

    python -m benchmarks.marker_scan [--extra 500] [--repeat 20]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from benchmarks._common import machine, median
from launchers import process


def psutil_scan(prefix: str) -> list[int]:
    """The previous implementation: every process through psutil, its environment parsed."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            value = proc.environ().get(process.MARKER_ENV)
        except (psutil.Error, OSError):
            continue
        if value is not None and value.startswith(prefix):
            found.append(proc.pid)
    return found


def timed(scan: Callable[[], object], repeat: int) -> float:
    """Median ms of one scan."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        scan()
        samples.append((time.perf_counter() - start) * 1000)
    return median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, default=500, help="idle processes to add")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    print(machine())
    prefix = "bench-marker-scan/"
    with tempfile.TemporaryDirectory(prefix="st-marker-") as tmp:
        rows = scan_rows(prefix, Path(tmp) / "sleep.log", args.extra, args.repeat)
    procs, new, old = rows[-1]
    print(f"marker scan: {new:.1f} ms with {procs} processes "
          f"(psutil scan: {old:.1f} ms, {old / new:.1f}x faster)")
    return 0


def scan_rows(prefix: str, log: Path, extra_count: int, repeat: int
              ) -> list[tuple[int, float, float]]:
    """(processes, ms new, ms old) as is and with ``extra_count`` idle processes added."""
    marked = process.ServerProcess.spawn(["sleep", "60"], {}, log, prefix + "t0")
    extra: list[subprocess.Popen[bytes]] = []
    try:
        rows = []
        for label, count in (("as is", 0), ("busy", extra_count)):
            while len(extra) < count:
                extra.append(subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL))
            found = [m.pid for m in process.marked_processes(prefix)]
            if found != [marked.pid] or psutil_scan(prefix) != [marked.pid]:
                raise RuntimeError(f"scan found {found}, expected [{marked.pid}]")
            new = timed(lambda: process.marked_processes(prefix), repeat)
            old = timed(lambda: psutil_scan(prefix), repeat)
            procs = len(psutil.pids())
            rows.append((procs, new, old))
            print(f"{label:<6} {procs:>4} processes: marked_processes {new:6.1f} ms, "
                  f"psutil scan {old:6.1f} ms")
    finally:
        for proc in extra:
            proc.kill()
        for proc in extra:
            proc.wait()
        marked.stop(grace=1.0)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
