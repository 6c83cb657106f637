"""Search efficiency: trials until within 2% of a known optimum, per landscape and strategy.

The searchers are servetune's own stack (``tuner.search.build_search``: ConcurrencyLimiter
-> FilteringSearcher (+ FailureMemory) -> random | Optuna TPE | staged), driven directly the
way Ray Tune's TuneController drives a search algorithm, one trial at a time:
``set_search_properties``; per trial ``suggest``; per round ``on_trial_result``; then
``on_trial_complete(result=last)`` and the recorder's ``record_outcome(kind=None)``, or for a
crash ``on_trial_complete(error=True)`` and ``record_outcome(kind="graph_capture")`` (the
kind servetune gives the stand-in's crash). No process is launched: a trial's rounds are the
landscape's noise-free metric times ``1 + noise * N(0, 1)`` (benchmarks/landscapes.py: the
stand-in's cost model, a toy server with and without interactions between stages, or a
table measured on GPUs), and a config the landscape crashes on is a crash.

The optimum is the best valid point (exhaustive, noise-free). A trial counts when it is
launched (a crash counts; a suggestion the filter rejects or answers from an earlier
measurement does not). Per strategy, over ``--seeds`` runs of at most ``--budget`` trials:
- first: trials until one launched config is truly within 2% of the optimum;
- picked: trials until the best-measured config so far (what the search would report) is;
  both as median [10th, 90th percentile] (nearest rank; a run that never got there counts as
  the budget, shown ">N"), and how many runs got there within the budget;
- the most launches of the always-crashing value in one run (landscapes that have one), how
  many runs ended before the budget (the search finished: staged after its last stage, random
  with every allowed point seen), how many of those ended because the filter gave up (50
  rejected or already-measured suggestions in a row, then 2,000 random draws), and the
  values the failure memory ruled out (union over seeds).
Staged search gets ``samples = budget`` and splits it evenly over its stages.

    python -m benchmarks.search_efficiency [--seeds 20] [--budget 324]
        [--landscapes bench interact table:PATH ...] [--strategies random staged+fa ...]

Default landscapes: every named one, and ``table:`` for each CSV in benchmarks/results/landscapes.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, machine, with_root_on_path
from benchmarks.landscape_table import load_landscape
from benchmarks.landscapes import NAMES, Landscape, fraction_of_optimum

CRASH_KIND = "graph_capture"
TABLES = ROOT / "benchmarks" / "results" / "landscapes"

# name -> (search, failure_aware)
STRATEGIES: dict[str, tuple[str, bool]] = {
    "random": ("random", False),
    "optuna": ("optuna", False),
    "staged": ("staged", False),
    "staged+fa": ("staged", True),
    "random+fa": ("random", True),
    "optuna+fa": ("optuna", True),
}


def _noise(seed: int, trial: int, index: int, sd: float) -> float:
    digest = hashlib.sha256(f"{seed}|{trial}|{index}".encode()).digest()
    return max(0.1, 1.0 + sd * random.Random(int.from_bytes(digest[:8], "big")).gauss(0, 1))


@dataclass
class Run:
    first: int | None  # trials until a launched config is within 2% (None: never)
    picked: int | None  # trials until the best-measured config is within 2%
    launched: int
    crashing_launches: int
    ruled_out: list[str]
    gave_up: bool  # the filter ended the search: no new configuration after its attempts


class _GaveUp(logging.Handler):
    """Counts the filter's "no new configuration after N attempts" (the search ends there)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("no new configuration")


def run_search(landscape: Landscape, strategy: str, seed: int, budget: int, rounds: int,
               noise: float, out_dir: Path) -> Run:
    """One search, driven as Ray drives it, until ``budget`` trials or the search ends."""
    from tuner.search.build import build_search
    from tuner.spec import Objective

    search, failure_aware = STRATEGIES[strategy]
    metric, mode = landscape.metric, landscape.mode
    stack = build_search(landscape.space, Objective(metric, mode, rounds), search=search,
                         stage_search="random", samples=budget, seed=seed,
                         failure_aware=failure_aware, max_concurrent=1, out_dir=out_dir)
    alg = stack.search_alg
    alg.set_search_properties(metric, mode, {})
    gave_up = _GaveUp()
    logging.getLogger("tuner.search.filtering").addHandler(gave_up)
    sign = 1.0 if mode == "max" else -1.0
    first = picked = None
    best_measured: tuple[float, float] | None = None  # (signed measured mean, truth)
    crashing = launched = 0
    for trial in range(budget):
        trial_id = f"t{trial:05d}"
        config = alg.suggest(trial_id)
        if config is None or config == "FINISHED":
            break  # FINISHED, or nothing to suggest with no trial running: the search ended
        launched += 1
        config = dict(config)
        if landscape.crashing:
            crashing += config.get(landscape.crashing[0]) == landscape.crashing[1]
        truth = landscape.evaluate(config)
        if truth is None:
            alg.on_trial_complete(trial_id, error=True)
            stack.filtering.record_outcome(trial_id, config, CRASH_KIND)
            continue
        values = []
        result: dict[str, Any] = {}
        for index in range(rounds):
            values.append(truth * _noise(seed, trial, index, noise))
            result = {metric: values[-1], "round": index + 1, "training_iteration": index + 1,
                      "trial_id": trial_id}
            alg.on_trial_result(trial_id, result)
        alg.on_trial_complete(trial_id, result=result)
        stack.filtering.record_outcome(trial_id, config, None)
        mean = sign * sum(values) / len(values)
        if best_measured is None or mean > best_measured[0]:
            best_measured = (mean, truth)
        if first is None and landscape.close(truth):
            first = launched
        if picked is None and landscape.close(best_measured[1]):
            picked = launched
    logging.getLogger("tuner.search.filtering").removeHandler(gave_up)
    memory = stack.filtering.memory
    ruled = [f"{e['knob']}={e['value']}" for e in memory.evidence()] if memory else []
    return Run(first, picked, launched, crashing, ruled, gave_up.count > 0)


# ---------------------------------------------------------------- statistics


def nearest_rank(values: Sequence[int | None], budget: int, q: float) -> int:
    """The ``q`` quantile (nearest rank) with never-reached runs counted as the budget."""
    ordered = sorted(budget if v is None else v for v in values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _show(value: int, budget: int) -> str:
    return f">{budget}" if value >= budget else str(value)


def spread(values: Sequence[int | None], budget: int) -> str:
    """median [p10, p90] of the trials until within 2%."""
    median, low, high = (nearest_rank(values, budget, q) for q in (0.5, 0.1, 0.9))
    return f"{_show(median, budget)} [{_show(low, budget)}, {_show(high, budget)}]"


def reached(values: Sequence[int | None]) -> str:
    return f"{sum(v is not None for v in values)}/{len(values)}"


def ratio(ours: Sequence[int | None], theirs: Sequence[int | None], budget: int) -> str:
    """ours / theirs of the medians; '<' where only theirs is censored, '>' where only ours."""
    a, b = nearest_rank(ours, budget, 0.5), nearest_rank(theirs, budget, 0.5)
    if a >= budget and b >= budget:
        return "n/a: neither got there"
    bound = "<" if b >= budget else ">" if a >= budget else ""
    return f"{bound}{a / b:.2f}x"


# ---------------------------------------------------------------- the tables


def header(landscape: Landscape) -> list[str]:
    space = landscape.space
    stages = " | ".join(s.name for s in space.stages) or "none"
    staged = landscape.staged_pass()
    reach = ("" if staged is None else
             f"; one exact pass of the stages ends at "
             f"{fraction_of_optimum(landscape, staged):.1%} of the optimum")
    baseline = fraction_of_optimum(landscape, landscape.evaluate(space.baseline()))
    return [f"landscape {landscape.name}: {landscape.about}",
            f"  {space.size} points ({landscape.valid} valid), stages {stages}; optimum "
            f"{landscape.optimum:.6g} {landscape.metric} ({landscape.mode}), "
            f"{landscape.within} point(s) within 2%, the baseline at {baseline:.1%}{reach}"]


COLUMNS = (f"  {'strategy':<10} {'first: median [p10, p90]':>25} {'picked: median [p10, p90]':>26}"
           f"  {'reached':>13}  {'crashing':>8}  {'ended':>5}  {'gave up':>7}  ruled out")


def row(strategy: str, runs: Sequence[Run], budget: int, crashing: bool) -> str:
    first = [r.first for r in runs]
    picked = [r.picked for r in runs]
    crash = str(max(r.crashing_launches for r in runs)) if crashing else "-"
    ended = sum(r.launched < budget for r in runs)
    gave_up = sum(r.gave_up for r in runs)
    ruled = sorted({x for r in runs for x in r.ruled_out})
    return (f"  {strategy:<10} {spread(first, budget):>25} {spread(picked, budget):>26}  "
            f"{reached(first) + ', ' + reached(picked):>13}  {crash:>8}  {ended:>5}  "
            f"{gave_up:>7}  {', '.join(ruled) or '-'}")


def default_landscapes() -> list[str]:
    return [*NAMES, *(f"table:{p}" for p in sorted(TABLES.glob("*.csv")))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=324,
                        help="trials per run at most (324: every point of bench+tree)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--landscapes", "--spaces", nargs="+", default=None,
                        help=f"{', '.join(NAMES)} or table:PATH (default: all, and every "
                             f"table in {TABLES.relative_to(ROOT)})")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES),
                        choices=list(STRATEGIES))
    args = parser.parse_args(argv)
    with_root_on_path()
    # "no new configuration after N attempts": counted below as a search that ended early
    logging.getLogger("tuner.search.filtering").propagate = False

    print(machine())
    print(f"{args.seeds} seeds, at most {args.budget} trials per run, {args.rounds} rounds "
          f"per trial, noise {args.noise:g}; searchers driven directly as Ray drives them; "
          f"first/picked: median [p10, p90] (nearest rank), reached: runs within the budget "
          f"(first, picked), crashing: most launches of the crashing value in one run")
    out_dir = Path(tempfile.mkdtemp(prefix="st-search-"))
    started = time.monotonic()
    headline: list[str] = []
    worst: dict[str, int] = {}  # strategy -> most launches of the crashing value in one run
    crash_value = None
    try:
        for name in args.landscapes or default_landscapes():
            landscape = load_landscape(name)
            began = time.monotonic()
            print()
            print("\n".join(header(landscape)))
            print(COLUMNS)
            runs: dict[str, list[Run]] = {}
            for strategy in args.strategies:
                runs[strategy] = [run_search(landscape, strategy, seed, args.budget,
                                             args.rounds, args.noise, out_dir)
                                  for seed in range(args.seeds)]
                print(row(strategy, runs[strategy], args.budget, landscape.crashing is not None))
                if landscape.crashing and any(r.crashing_launches for r in runs[strategy]):
                    crash_value = landscape.crashing
                    worst[strategy] = max(worst.get(strategy, 0),
                                          max(r.crashing_launches for r in runs[strategy]))
            print(f"  ({time.monotonic() - began:.0f} s)")
            if "random" in runs and "staged+fa" in runs:
                ours, theirs = runs["staged+fa"], runs["random"]
                headline.append(
                    f"{landscape.name}: staged+failure-aware "
                    f"{spread([r.first for r in ours], args.budget)} ({reached([r.first for r in ours])}) "
                    f"vs random {spread([r.first for r in theirs], args.budget)} "
                    f"({reached([r.first for r in theirs])}) trials "
                    f"({ratio([r.first for r in ours], [r.first for r in theirs], args.budget)})")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    print()
    print(f"wall time: {time.monotonic() - started:.0f} s")
    if crash_value:
        print(f"most launches of the always-crashing {crash_value[0]}={crash_value[1]} in one "
              f"run: " + ", ".join(f"{k} {v}" for k, v in worst.items()))
    print("trials to within 2% of the optimum (first: median [p10, p90], runs that got there)"
          ": " + "; ".join(headline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
