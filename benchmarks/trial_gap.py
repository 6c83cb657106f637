"""The gap between trials of a default `servetune run`: from one trial's end to the next
one's start, as the driver journals them (results.jsonl), with the defaults a user gets
(the proxy workload, the Ray dashboard on, trial actors reused, ASHA, the confirm stage).

The gap is Ray Tune's and servetune's own time between trials (scheduling, the searcher, a
fresh or reused actor); a trial's own launch and teardown are inside the trial.

    python -m benchmarks.trial_gap [--samples 12] [--runs 1] [-- extra servetune run flags]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks._common import ROOT, machine, median, spread, with_root_on_path
from simulator.runs import owned_tuner


def gaps(journal: Path) -> dict[str, list[float]]:
    """Seconds from each trial's end to the next trial's start, per phase (launch order)."""
    events = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    starts = sorted((e["time"], e["trial_id"], e.get("phase", "search")) for e in events
                    if e["event"] == "start")
    ends = {e["trial_id"]: e["time"] for e in events if e["event"] == "end"}
    out: dict[str, list[float]] = {}
    for (_, prev, _), (t_next, _, phase) in itertools.pairwise(starts):
        if prev in ends and t_next >= ends[prev]:
            out.setdefault(phase, []).append(t_next - ends[prev])
    return out


def run_once(work: Path, extra: list[str]) -> tuple[dict[str, list[float]], float, str]:
    out = work / "exp"
    cmd = owned_tuner(["run", "--out", str(out), *extra])
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          stdin=subprocess.DEVNULL)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"servetune run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    return gaps(out / "results.jsonl"), wall, first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--samples", type=int, help="--samples for servetune run (default its own)")
    parser.add_argument("extra", nargs="*", help="more servetune run flags (after --)")
    args = parser.parse_args(argv)
    with_root_on_path()
    print(machine())
    extra = [*(["--samples", str(args.samples)] if args.samples else []), *args.extra]
    print(f"servetune run {' '.join(extra) or '(defaults)'}, {args.runs} run(s)")
    per_phase: dict[str, list[float]] = {}
    for index in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="st-gap-"))
        try:
            found, wall, first = run_once(work, extra)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for phase, values in found.items():
            per_phase.setdefault(phase, []).extend(values)
        print(f"run {index + 1}: {wall:.1f} s wall; {first}")
    everything = [g for values in per_phase.values() for g in values]
    for phase, values in sorted(per_phase.items()):
        print(f"gap between trials ({phase}, {len(values)}): {spread(values)}")
    print(f"HEADLINE median gap between trials: {median(everything):.3f} s "
          f"({len(everything)} gaps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
