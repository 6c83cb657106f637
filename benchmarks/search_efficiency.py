"""Search efficiency: trials until within 2% of a known optimum, per landscape and strategy.

The searchers are servetune's own stack (``tuner.search.build_search``: ConcurrencyLimiter
-> FilteringSearcher (+ FailureMemory) -> auto | random | Optuna TPE | staged), driven
directly the way Ray Tune's TuneController drives a search algorithm, one trial at a time:
``set_search_properties``; per trial ``suggest``; per round ``on_trial_result``; then
``on_trial_complete(result=last)`` and the recorder's ``record_outcome(kind=None)``, or for a
failure ``on_trial_complete(error=True)`` and ``record_outcome(kind=...)`` with the kind the
landscape gives the point (a measured table's own column; the stand-in's crash is
``graph_capture``). No process is launched: a trial's rounds are the landscape's noise-free
metric times ``1 + noise * N(0, 1)`` (benchmarks/landscapes.py and machines.py: the
stand-in's cost model, toy servers, machines modelled with their failures, or a table
measured on GPUs).

The optimum is the best valid point that runs (exhaustive, noise-free). A trial counts when
it is launched (a failure counts; a suggestion the filter rejects or answers from an earlier
measurement does not). Per strategy and budget, over ``--seeds`` runs:
- first: trials until one launched config is truly within 2% of the optimum;
- picked: trials until the best-measured config so far (what the search would report) is;
  both as median [10th, 90th percentile] (nearest rank; a run that never got there counts as
  the budget, shown ">N"), and how many runs got there within the budget;
- failing: the most launches, in one run, of one setting that fails wherever it is;
- how many runs ended before the budget (the search finished), how many of those because
  the filter gave up (50 rejected or already-measured suggestions in a row, then 2,000
  random draws), the settings the failure memory ruled out (union over seeds), and those of
  them that are innocent (some valid point with them runs): marked "INNOCENT".
Each landscape is run at the budget the default sizes for its space (``sized``:
tuner/search/budget.py, what ``servetune run`` without ``--samples`` gets) and at each of
``--budgets``. The last lines check the default (``auto``) from the runs that were made:
within 2% in at least 19 of 20 runs at its own sized budget and never in fewer runs than
random search with the failure memory there, median trials no more than Optuna's with
failure memory, no innocent setting ruled out, a setting that always fails launched at most
twice in a run; a goal whose runs were not made says so.

    python -m benchmarks.search_efficiency [--seeds 20] [--first-seed 0] [--budgets sized 12 40 120]
        [--landscapes bench founding table:PATH ...] [--strategies auto optuna+fa ...]

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, machine, with_root_on_path
from benchmarks.landscape_table import load_landscape
from benchmarks.landscapes import NAMES, Landscape, fraction_of_optimum

TABLES = ROOT / "benchmarks" / "results" / "landscapes"
DEFAULT = "auto"
REFERENCE = "optuna+fa"  # what the default must not be slower than
FLOOR = "random+fa"  # what the default must never get within 2% in fewer runs than
GOAL_RUNS = 0.95  # 19 of 20 runs within 2% at the default's own sized budget
SIZED = "sized"  # in --budgets: the budget the default sizes for the landscape's space

# name -> (search, failure_aware)
STRATEGIES: dict[str, tuple[str, bool]] = {
    "auto": ("auto", True),
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
    failing_launches: int  # the most launches of one always-failing setting
    ruled_out: list[str]
    innocent: list[str]  # ruled out, yet some valid point with it runs
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
                         failure_aware=failure_aware, max_concurrent=1, out_dir=out_dir,
                         refusal=getattr(landscape, "refusal", None),
                         resolved=getattr(landscape, "resolved", None))
    alg = stack.search_alg
    alg.set_search_properties(metric, mode, {})
    gave_up = _GaveUp()
    logging.getLogger("tuner.search.wrappers").addHandler(gave_up)
    sign = 1.0 if mode == "max" else -1.0
    first = picked = None
    best_measured: tuple[float, float] | None = None  # (signed measured mean, truth)
    failing: dict[tuple[str, Any], int] = {}
    launched = 0
    for trial in range(budget):
        trial_id = f"t{trial:05d}"
        config = alg.suggest(trial_id)
        if config is None or config == "FINISHED":
            break  # FINISHED, or nothing to suggest with no trial running: the search ended
        launched += 1
        config = dict(config)
        for setting in landscape.culprits:
            if config.get(setting[0]) == setting[1]:
                failing[setting] = failing.get(setting, 0) + 1
        truth = landscape.evaluate(config)
        if truth is None:
            alg.on_trial_complete(trial_id, error=True)
            stack.filtering.record_outcome(trial_id, config, landscape.failure(config))
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
    logging.getLogger("tuner.search.wrappers").removeHandler(gave_up)
    memory = stack.filtering.memory
    evidence = memory.evidence() if memory else []
    ruled = [f"{e['knob']}={e['value']}" for e in evidence]
    innocent = [f"{e['knob']}={e['value']}" for e in evidence
                if landscape.innocent(e["knob"], e["value"])]
    return Run(first, picked, launched, max(failing.values(), default=0), ruled, innocent,
               gave_up.count > 0)


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
    failing = ", ".join(sorted(f"{k}={v}" for k, v in landscape.culprits)) or "none"
    return [f"landscape {landscape.name}: {landscape.about}",
            f"  {space.size} points ({landscape.valid} valid, {len(landscape.values)} run), "
            f"stages {stages}; optimum {landscape.optimum:.6g} {landscape.metric} "
            f"({landscape.mode}), {landscape.within} point(s) within 2%, the baseline at "
            f"{baseline:.1%}{reach}; settings that always fail: {failing}"]


COLUMNS = (f"  {'budget':>6} {'strategy':<10} {'first: median [p10, p90]':>25} "
           f"{'picked: median [p10, p90]':>26}  {'reached':>13}  {'failing':>7}  {'ended':>5}  "
           f"{'gave up':>7}  ruled out")


def row(strategy: str, runs: Sequence[Run], budget: int, failing: bool) -> str:
    first = [r.first for r in runs]
    picked = [r.picked for r in runs]
    crash = str(max(r.failing_launches for r in runs)) if failing else "-"
    ended = sum(r.launched < budget for r in runs)
    gave_up = sum(r.gave_up for r in runs)
    innocent = {x for r in runs for x in r.innocent}
    ruled = sorted({x for r in runs for x in r.ruled_out})
    shown = [f"{x} (INNOCENT)" if x in innocent else x for x in ruled]
    return (f"  {budget:>6} {strategy:<10} {spread(first, budget):>25} "
            f"{spread(picked, budget):>26}  {reached(first) + ', ' + reached(picked):>13}  "
            f"{crash:>7}  {ended:>5}  {gave_up:>7}  {', '.join(shown) or '-'}")


def default_landscapes() -> list[str]:
    return [*NAMES, *(f"table:{p}" for p in sorted(TABLES.glob("*.csv")))]


@dataclass
class Check:
    """The default's goals, from the runs made over every landscape and budget."""

    misses: list[str]  # landscapes where the default got within 2% in too few runs
    slower: list[str]  # landscapes where its median trials exceed the reference's
    innocent: int = 0  # innocent settings ruled out, over all of the default's runs
    failing: int = 0  # the most launches of an always-failing setting in one default run
    judged: list[str] = field(default_factory=list)  # landscapes run at their sized budget
    unjudged: list[str] = field(default_factory=list)  # ... not run there (no goal line)
    below: list[str] = field(default_factory=list)  # fewer runs within 2% than FLOOR's
    floors: int = 0  # landscapes where FLOOR ran beside the default at the sized budget
    compared: int = 0  # blocks of runs where REFERENCE ran beside the default

    def lines(self, budgets: Sequence[int | str], seeds: int) -> list[str]:
        goal = math.ceil(GOAL_RUNS * seeds)
        if self.judged:
            head = (f"default ({DEFAULT}) within 2% in >= {goal}/{seeds} runs at its own "
                    f"sized budget on {len(self.judged)} landscape(s): ")
            out = [head + ("yes" if not self.misses else "NO: " + "; ".join(self.misses))]
        else:
            out = [f"default ({DEFAULT}) at its own sized budget: not judged (no run at "
                   f"'{SIZED}'; --budgets {SIZED} makes them)"]
        if self.unjudged:
            out.append(f"  not run at their sized budget: {', '.join(self.unjudged)}")
        if self.floors:
            out.append(f"default never within 2% in fewer runs than {FLOOR} at the sized "
                       f"budget ({self.floors} landscape(s)): "
                       + ("yes" if not self.below else "NO: " + "; ".join(self.below)))
        else:
            out.append(f"default vs {FLOOR} at the sized budget: not judged ({FLOOR} not run "
                       f"there)")
        if self.compared:
            out.append(f"default's median trials to within 2% <= {REFERENCE}'s at budgets "
                       f"{', '.join(map(str, budgets))}: "
                       + ("yes" if not self.slower else "NO: " + "; ".join(self.slower)))
        else:
            out.append(f"default vs {REFERENCE}'s median trials: not judged ({REFERENCE} not "
                       f"run)")
        out.append(f"innocent settings ruled out in the default's runs: {self.innocent}; most "
                   f"launches of an always-failing setting in one run: {self.failing}")
        return out

    def add(self, name: str, budget: int, runs: dict[str, list[Run]], sized: bool) -> None:
        """One landscape's runs at one budget (``sized``: the default's own for the space)."""
        ours = runs.get(DEFAULT)
        if ours is None:
            return
        self.innocent += sum(len(r.innocent) for r in ours)
        self.failing = max(self.failing, max(r.failing_launches for r in ours))
        got = sum(r.first is not None for r in ours)
        if sized:
            self.judged.append(name)
            if got < math.ceil(GOAL_RUNS * len(ours)):
                self.misses.append(f"{name} {got}/{len(ours)} at {budget}")
            floor = runs.get(FLOOR)
            if floor is not None:
                self.floors += 1
                theirs = sum(r.first is not None for r in floor)
                if got < theirs:
                    self.below.append(f"{name} {got} vs {theirs} of {len(ours)} at {budget}")
        theirs_runs = runs.get(REFERENCE)
        if theirs_runs is not None:
            self.compared += 1
            a = nearest_rank([r.first for r in ours], budget, 0.5)
            b = nearest_rank([r.first for r in theirs_runs], budget, 0.5)
            if a > b:
                self.slower.append(f"{name} at {budget}: {_show(a, budget)} vs "
                                   f"{_show(b, budget)}")

    def finish(self, names: Sequence[str]) -> None:
        """Landscapes the default ran on but never at its sized budget."""
        self.unjudged = [n for n in names if n not in self.judged]


def budgets_for(landscape: Landscape, wanted: Sequence[str]) -> list[tuple[int, bool]]:
    """The budgets to run a landscape at, in order, once each: ``sized`` -> the default's
    sized budget for its space; (budget, whether it is the sized one)."""
    from tuner.search.budget import sized_budget

    sized = sized_budget(landscape.space).trials
    out: dict[int, bool] = {}
    for text in wanted:
        budget = sized if text == SIZED else int(text)
        out[budget] = out.get(budget, False) or text == SIZED or budget == sized
    return list(out.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (a hold-out: --first-seed 20 --seeds 80)")
    parser.add_argument("--budgets", "--budget", nargs="+", default=[SIZED, "12", "40", "120"],
                        help=f"trials per run at most, or '{SIZED}' (the default's sized budget "
                             f"for each landscape's space); one block of runs per budget")
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
    logging.getLogger("tuner.search.wrappers").propagate = False

    print(machine())
    print(f"{args.seeds} seeds from {args.first_seed}, budgets {', '.join(map(str, args.budgets))} trials, "
          f"{args.rounds} rounds per trial, noise {args.noise:g}; searchers driven directly as "
          f"Ray drives them; first/picked: median [p10, p90] (nearest rank), reached: runs "
          f"within the budget (first, picked), failing: most launches of one always-failing "
          f"setting in one run")
    out_dir = Path(tempfile.mkdtemp(prefix="st-search-"))
    started = time.monotonic()
    verdict = Check([], [])
    ran: list[str] = []
    try:
        for name in args.landscapes or default_landscapes():
            landscape = load_landscape(name)
            ran.append(landscape.name)
            began = time.monotonic()
            print()
            print("\n".join(header(landscape)))
            print(COLUMNS)
            for budget, sized in budgets_for(landscape, args.budgets):
                if sized:
                    print(f"  {budget:>6} is the budget the default sizes for this space")
                runs: dict[str, list[Run]] = {}
                for strategy in args.strategies:
                    runs[strategy] = [run_search(landscape, strategy, seed, budget,
                                                 args.rounds, args.noise, out_dir)
                                      for seed in range(args.first_seed,
                                                        args.first_seed + args.seeds)]
                    print(row(strategy, runs[strategy], budget, bool(landscape.culprits)),
                          flush=True)
                verdict.add(landscape.name, budget, runs, sized)
            print(f"  ({time.monotonic() - began:.0f} s)")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    print()
    print(f"wall time: {time.monotonic() - started:.0f} s")
    verdict.finish(ran)
    if DEFAULT in args.strategies:
        for line in verdict.lines(args.budgets, args.seeds):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
