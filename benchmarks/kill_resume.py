"""A driver killed with kill -9 at a fixed moment of a `--samples 6` run on the stand-in, then
`servetune run --resume` (issue 30): does the resume run the rest of the budget, and is
anything of the killed driver left?

    python -m benchmarks.kill_resume [--repeats 3] [--at 1 3 10 30] [--keep DIR]

One row per kill moment: runs, the search trials that finished (ok, stopped or failed) in
results.csv after the resume (the budget is 6), runs where Ray's experiment checkpoint did
not exist yet at the kill, processes left (the experiment's marker, or the killed driver's
private Ray session) once the resume returned, and the resume's wall time. Trials here take
a few seconds each (the stand-in at full time scale, 3 rounds) so that 30 s still lands in
the middle of the search.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import psutil

from benchmarks._common import exit_on_sigterm, machine, with_root_on_path
from simulator.runs import Background, Experiment, ray_tmpdir, stand_in

SAMPLES = 6
FINISHED = ("ok", "stopped", "failed")
ARGS = ("--space", "nccl-pcie", "--samples", str(SAMPLES), "--rounds", "3",
        "--scheduler", "fifo", "--no-dashboard")
SLOWER = ("--fake-time-scale", "1.0")  # later switches win: full-length rounds


def finished_search(table: pd.DataFrame) -> pd.DataFrame:
    """The search trials of a results table that ended (not the confirm stage's)."""
    search = table[table["phase"].fillna("search") == "search"]
    return search[search["status"].isin(FINISHED)]


def ray_session_processes(ray_tmp: Path) -> list[psutil.Process]:
    """Live (not defunct) processes of a Ray started with this RAY_TMPDIR: its path is in
    their command lines (session and log folders)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and \
                    str(ray_tmp) in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@dataclass
class Kill:
    """What a kill -9 of the driver found."""

    moment: str
    seconds: float  # since the driver started
    had_spec: bool  # servetune.json written (the folder is resumable)
    had_ray_state: bool  # Ray's experiment_state-*.json written
    started: int  # trials the journal had started
    ray_pids: list[psutil.Process] = field(default_factory=list)

    @classmethod
    def now(cls, background: Background, moment: str, ray_tmp: Path) -> Kill:
        exp = background.experiment
        ray = ray_session_processes(ray_tmp)
        kill = cls(moment, time.monotonic() - background.began,
                   (exp.out / "servetune.json").exists(),
                   any(exp.out.glob("experiment_state-*.json")),
                   sum(e.get("event") == "start" for e in exp.journal()), ray)
        background.signal_driver(signal.SIGKILL)
        background.finish(timeout=30)
        return kill


@dataclass
class Outcome:
    kill: Kill
    returncode: int
    finished: int
    left: list[str]
    resume_s: float
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.finished == SAMPLES and not self.left


def kill_and_resume(at: float, keep: Path | None = None) -> Outcome:
    root = Path(tempfile.mkdtemp(prefix="kill-resume-", dir=keep))
    try:
        with ray_tmpdir() as ray_tmp:
            exp = Experiment.create(root, ray_tmp)
            try:
                background = exp.start(["run", *exp.args(*ARGS, server=stand_in(*SLOWER))])
                time.sleep(max(0.0, at - (time.monotonic() - background.began)))
                if background.popen.poll() is not None:
                    raise RuntimeError(f"the run ended before {at} s: {background.finish(0)}")
                kill = Kill.now(background, f"{at:g} s", ray_tmp)
                resumed = exp.run(["run", "--resume", str(exp.out)], timeout=400)
                finished = len(finished_search(exp.table())) if resumed.returncode == 0 else 0
                left = [f"{m.pid} {m.marker}" for m in exp.leftovers()]
                left += [f"{p.pid} {p.name()}" for p in kill.ray_pids
                         if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
                left += [f"{p.pid} ray" for p in ray_session_processes(ray_tmp)]
                return Outcome(kill, resumed.returncode, finished, sorted(set(left)),
                               resumed.seconds, str(resumed))
            finally:
                exp.cleanup()
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def table(outcomes: list[Outcome]) -> list[str]:
    head = (f"{'kill at':>7} {'runs':>4} {'search trials after resume':>27} "
            f"{'no Ray checkpoint yet':>21} {'left':>4}  {'resume s (median [min, max])':<28} ok")
    lines = [head, "-" * len(head)]
    rows: dict[str, list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault(o.kill.moment, []).append(o)
    for moment, runs in rows.items():
        counts = ", ".join(str(o.finished) for o in runs)
        times = [o.resume_s for o in runs]
        lines.append(f"{moment:>7} {len(runs):>4} {counts:>27} "
                     f"{sum(not o.kill.had_ray_state for o in runs):>21} "
                     f"{sum(len(o.left) for o in runs):>4}  "
                     f"{statistics.median(times):.1f} [{min(times):.1f}, {max(times):.1f}]"
                     f"{'':<12} {'yes' if all(o.ok for o in runs) else 'NO'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kill_resume", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--at", type=float, nargs="+", default=[1, 3, 10, 30])
    parser.add_argument("--keep", type=Path, help="keep each run's folder under DIR")
    args = parser.parse_args(argv)
    with_root_on_path()
    exit_on_sigterm()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    print(machine())
    outcomes: list[Outcome] = []
    for repeat in range(args.repeats):
        for at in args.at:
            o = kill_and_resume(at, args.keep)
            outcomes.append(o)
            print(f"  repeat {repeat + 1}, kill at {at:g} s: {o.kill.started} trials started, "
                  f"Ray checkpoint {'yes' if o.kill.had_ray_state else 'no'}; after --resume "
                  f"{o.finished} search trials, {len(o.left)} left, {o.resume_s:.1f} s",
                  flush=True)
            if not o.ok:
                print(o.log[-4000:], o.left, file=sys.stderr)
    print()
    for line in table(outcomes):
        print(line)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
