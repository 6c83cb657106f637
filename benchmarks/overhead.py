"""Per-trial overhead: what servetune adds to a trial beyond the server's own work.

servetune runs N+1 trials of the SGLang stand-in (fast startup) through ``tuner.run.experiment.run``
(random search, FIFO: every trial runs every round). A trial's cycle is the time from the
driver seeing it start to the driver seeing the next one start; its work is what the server
itself takes: spawn -> the stand-in's ``FAKE_READY_AT`` (time to ready) plus warm-up and the
benchmark rounds. Overhead = cycle - work.

Then a bare Ray Tune loop (same resources, ``reuse_actors=True``, Ray's defaults otherwise)
runs N+1 trials whose trainable only sleeps the same durations, reporting once per round.
Its overhead = cycle - slept. The headline is the difference of the two medians.

    python -m benchmarks.overhead [--trials 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import READY_RE, STAND_IN, machine, median, spread, with_root_on_path


@dataclass(frozen=True)
class Work:
    """What the server took in one servetune trial: the bare loop sleeps the same."""

    server_s: float  # spawn -> the stand-in's ready moment
    warmup_s: float
    bench_s: float  # all rounds

    @property
    def total(self) -> float:
        return self.server_s + self.warmup_s + self.bench_s


@dataclass(frozen=True)
class Phases:
    """One servetune trial, split at the moments its record and logs give."""

    cycle: float  # driver: this trial's start -> the next trial's start
    work: Work
    dispatch: float  # driver start -> run_trial begins in the actor
    setup: float  # reap, validate, plan, preflight, GPU check
    detect: float  # the stand-in's ready moment -> servetune's ready
    teardown: float  # last round reported -> run_trial returns (stop, reap)
    gap: float  # run_trial returns -> the driver starts the next trial

    @property
    def overhead(self) -> float:
        return self.cycle - self.work.total


def _starts(journal: Path) -> dict[str, float]:
    starts: dict[str, float] = {}
    for line in journal.read_text().splitlines():
        event = json.loads(line)
        # search trials only: the confirm phase (repeats, the speculative-off reference)
        # runs as a Tuner of its own after the search
        if event.get("event") == "start" and event.get("phase") is None:
            starts.setdefault(event["trial_id"], float(event["time"]))
    return starts


def servetune_phases(out_dir: Path) -> list[Phases]:
    starts = sorted(_starts(out_dir / "results.jsonl").items(), key=lambda kv: kv[1])
    phases = []
    for (tid, start), (_, next_start) in itertools.pairwise(starts):
        record = json.loads((out_dir / tid / "trial.json").read_text())
        if record["status"] != "ok":
            raise RuntimeError(f"trial {tid} did not run through: {record.get('failure')}")
        t = record["timings"]
        match = READY_RE.search((out_dir / tid / "server.log").read_text())
        if match is None:
            raise RuntimeError(f"trial {tid}: no FAKE_READY_AT in its server.log")
        spawn = t["wall_start"] + t["setup_s"]
        ready_at = float(match.group(1))
        detected = spawn + t["ready_s"]
        work = Work(ready_at - spawn, t["warmup_s"], t["bench_s"])
        bench_end = detected + t["warmup_s"] + t["bench_s"]
        phases.append(Phases(cycle=next_start - start, work=work,
                             dispatch=t["wall_start"] - start, setup=t["setup_s"],
                             detect=detected - ready_at, teardown=t["wall_end"] - bench_end,
                             gap=next_start - t["wall_end"]))
    return phases


def run_servetune(out_dir: Path, space: str, trials: int, rounds: int, seed: int
                  ) -> list[Phases]:
    from launchers.sglang.launcher import SGLangArgs
    from tuner.run import experiment
    from tuner.spec import ExperimentSpec

    model = out_dir.parent / "model"
    model.mkdir(parents=True, exist_ok=True)
    spec = ExperimentSpec(
        name="bench-overhead", out_dir=out_dir, space=space,
        workload=SGLangArgs(model=str(model), server_cmd=list(STAND_IN),
                            speculative_algorithm="EAGLE3", port=0),
        search="random", scheduler="fifo", samples=trials + 1, rounds=rounds, seed=seed,
        num_gpus=8, confirm=0)  # the defaults otherwise: dashboard on, actors reused
    with contextlib.redirect_stdout(io.StringIO()):  # the per-round progress lines
        experiment.run(spec, echo=lambda line: None)
    return servetune_phases(out_dir)


def run_bare(storage: Path, works: list[Work], rounds: int) -> list[float]:
    """Overheads of a bare Ray Tune loop whose trials sleep ``works`` (trial i sleeps works[i])."""
    import logging

    import ray
    from ray import tune

    starts: dict[int, float] = {}  # work index -> the driver's start time

    class Starts(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any
                           ) -> None:
            starts[int(trial.config["work"]["i"])] = time.time()

    def sleeper(config: dict[str, Any]) -> None:
        work = config["work"]
        time.sleep(work["before"])
        for index in range(work["rounds"]):
            time.sleep(work["round"])
            tune.report({"score": 1.0, "round": index + 1})

    params = [{"i": i, "before": w.server_s + w.warmup_s, "round": w.bench_s / rounds,
               "rounds": rounds} for i, w in enumerate(works)]
    ray.init(num_gpus=8, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        tuner = tune.Tuner(
            tune.with_resources(sleeper, {"cpu": 1, "gpu": 8}),
            param_space={"work": tune.grid_search(params)},
            tune_config=tune.TuneConfig(metric="score", mode="max", reuse_actors=True),
            run_config=tune.RunConfig(name="bare", storage_path=str(storage), verbose=0,
                                      callbacks=[Starts()]))
        tuner.fit()
    finally:
        ray.shutdown()
    ordered = [starts[i] for i in range(len(works))]
    return [b - a - (params[i]["before"] + params[i]["round"] * rounds)
            for i, (a, b) in enumerate(itertools.pairwise(ordered))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="measured trials (runs one more)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--space", default="verify-campaign",
                        help="preset: its NCCL env and server flags (each new argv is preflighted)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the experiment folders here")
    args = parser.parse_args(argv)
    with_root_on_path()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    work_dir = Path(tempfile.mkdtemp(prefix="st-overhead-")) if args.keep is None else args.keep
    print(machine())
    print(f"servetune: {args.trials + 1} trials of the stand-in ({args.space}, random, "
          f"FIFO, {args.rounds} rounds); the first {args.trials} are measured")
    saved = dict(os.environ)
    t0 = time.monotonic()
    phases = run_servetune(work_dir / "servetune", args.space, args.trials, args.rounds, args.seed)
    os.environ.clear()
    os.environ.update(saved)  # the bare loop runs with Ray's defaults
    print(f"  servetune run (Ray start and end included): {time.monotonic() - t0:.1f} s")
    for name in ("cycle", "dispatch", "setup", "detect", "teardown", "gap", "overhead"):
        print(f"  {name:<9} {spread([getattr(p, name) for p in phases])}")
    print(f"  work: server to ready {spread([p.work.server_s for p in phases])}, "
          f"warm-up + rounds {spread([p.work.warmup_s + p.work.bench_s for p in phases])}")
    bare = run_bare(work_dir / "bare", [p.work for p in phases] + [phases[-1].work],
                    args.rounds)
    print(f"bare Ray Tune: {len(bare)} trials sleeping the same work")
    print(f"  overhead  {spread(bare)}")
    if args.keep is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    ours = median([p.overhead for p in phases])
    print(f"overhead per trial: {ours - median(bare):.2f} s beyond bare Ray Tune "
          f"(bare loop: {median(bare):.2f} s per trial)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
