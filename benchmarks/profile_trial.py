"""Profile servetune's own side of a trial: ``tuner.run.trial.run_trial`` on the stand-in, no Ray.

Runs N trials of the SGLang stand-in one after another under cProfile, the way a reused Ray
actor runs them (same process, same marker prefix), prints the functions that take the most
cumulative time, and splits each trial into its phases. Where the time goes outside the
server's own work is what servetune can make faster.

    python -m benchmarks.profile_trial [--trials 5] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import STAND_IN, machine, median, spread, with_root_on_path


def run_trials(work_dir: Path, trials: int, rounds: int, seed: int) -> list[dict[str, float]]:
    from launchers.base import TrialContext
    from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
    from search_spaces.space import load
    from tuner.run.trial import resolve_port, run_trial

    space = load("nccl-pcie")
    model = work_dir / "model"
    model.mkdir(parents=True, exist_ok=True)
    workload = SGLangWorkload(SGLangArgs(model=str(model), server_cmd=list(STAND_IN),
                                         speculative_algorithm="EAGLE3", port=0))
    rng = random.Random(seed)
    timings = []
    for index in range(trials):
        config = space.sample(rng)
        while space.validate(config):
            config = space.sample(rng)
        ctx = TrialContext("bench-profile", f"t{index:03d}", work_dir / f"t{index:03d}",
                           tuple(str(g) for g in range(8)), resolve_port(0), seed)

        def report(metrics: dict[str, Any]) -> None:
            return None

        record = run_trial(config, space=space, workload=workload, ctx=ctx, rounds=rounds,
                           report=report, experiment_prefix="bench-profile/")
        timings.append(record.timings)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumulative")
    args = parser.parse_args(argv)
    with_root_on_path()
    print(machine())
    work_dir = Path(tempfile.mkdtemp(prefix="st-profile-"))
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        timings = run_trials(work_dir, args.trials, args.rounds, args.seed)
        profiler.disable()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(args.sort).print_stats(args.top)
    print(out.getvalue())
    for key in ("setup_s", "ready_s", "warmup_s", "bench_s", "total_s"):
        print(f"{key:<9} {spread([t[key] for t in timings if key in t])}")
    rest = [t["total_s"] - t["setup_s"] - t["ready_s"] - t["warmup_s"] - t["bench_s"]
            for t in timings]
    print(f"{'stop':<9} {spread(rest)}")
    own = [t["setup_s"] + r for t, r in zip(timings, rest, strict=True)]
    print(f"servetune's own time per trial (setup + stop): {median(own):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
