"""Search efficiency: trials until within 2% of a known optimum, per search strategy.

The searchers are servetune's own stack (``tuner.search.build_search``: ConcurrencyLimiter
-> FilteringSearcher (+ FailureMemory) -> random | Optuna TPE | staged), driven directly the
way Ray Tune's TuneController drives a search algorithm, one trial at a time:
``set_search_properties``; per trial ``suggest``; per round ``on_trial_result``; then
``on_trial_complete(result=last)`` and the recorder's ``record_outcome(kind=None)``, or for a
crash ``on_trial_complete(error=True)`` and ``record_outcome(kind="graph_capture")`` (the
kind servetune gives the stand-in's crash). No process is launched: a trial's rounds are the
stand-in's cost model (``tests/fakes/cost_model.py``) times ``1 + noise * N(0, 1)``, and a
config the stand-in would crash at startup (a global ``NCCL_ALGO=Tree`` at tp 8) is a crash.

The optimum is ``cost_model.optimum`` over the space (exhaustive, noise-free). A trial counts
when it is launched (a crash counts; a suggestion the filter rejects or answers from an
earlier measurement does not). Reported per strategy, median over seeds:
- first: trials until one launched config is truly within 2% of the optimum;
- picked: trials until the best-measured config so far (what the search would report) is
  truly within 2%.
A run that never gets there within ``--budget`` trials counts as the budget, shown ">N".
Also per strategy: launches of the crashing value in each run, how many runs ended before
the budget (the search finished, e.g. staged after its last stage or random with every
allowed point seen), how many of those ended because the filter gave up (200 rejected or
already-measured suggestions in a row), and the values the failure memory ruled out (union
over seeds). Staged search gets ``samples = budget`` and splits it evenly over its stages.

Spaces: ``bench`` (243 points in verify-campaign's four stages, defined here),
``bench+tree`` (the same with a global ``NCCL_ALGO=Tree``, which always crashes: 324 points),
and the shipped ``verify-campaign`` preset (51,840 points, 46,440 valid).

    python -m benchmarks.search_efficiency [--seeds 5] [--budget 324]
        [--spaces bench bench+tree verify-campaign] [--strategies random optuna ...]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import machine, with_root_on_path

TP = 8
SPEC_ALGORITHM = "EAGLE3"
METRIC = "output_tok_s"
CRASH_KIND = "graph_capture"
CRASHING = ("NCCL_ALGO", "Tree")

BENCH_SPACE: dict[str, Any] = {
    "name": "bench",
    "description": "verify-campaign's four stages, two values per knob besides the default.",
    "knobs": {
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"],
        "NCCL_PROTO": ["LL", "Simple"],
        "NCCL_MAX_NCHANNELS": [4, 16],
        "--flashinfer-allreduce-fusion-backend": ["auto", "trtllm"],
        "--speculative-num-draft-tokens": [3, 6],
    },
    "pins": {"NCCL_NVLS_ENABLE": 0},
    "stages": [
        {"name": "allreduce", "knobs": ["NCCL_ALGO", "NCCL_PROTO"]},
        {"name": "channels", "knobs": ["NCCL_MAX_NCHANNELS"]},
        {"name": "fusion", "knobs": ["--flashinfer-allreduce-fusion-backend"]},
        {"name": "speculative", "knobs": ["--speculative-num-draft-tokens"]},
    ],
}

# name -> (search, failure_aware)
STRATEGIES: dict[str, tuple[str, bool]] = {
    "random": ("random", False),
    "optuna": ("optuna", False),
    "staged": ("staged", False),
    "staged+fa": ("staged", True),
    "random+fa": ("random", True),
    "optuna+fa": ("optuna", True),
}


def load_space(name: str) -> Any:
    from search_spaces.space import from_mapping, load

    if name == "bench":
        return from_mapping(BENCH_SPACE, "benchmarks/search_efficiency.py")
    if name == "bench+tree":
        data = {**BENCH_SPACE, "name": "bench+tree",
                "knobs": {**BENCH_SPACE["knobs"],
                          "NCCL_ALGO": [*BENCH_SPACE["knobs"]["NCCL_ALGO"], "Tree"]}}
        return from_mapping(data, "benchmarks/search_efficiency.py")
    return load(name)


def true_tok_s(config: dict[str, Any]) -> float | None:
    """The cost model's tok/s at tp 8 with EAGLE3; None when the stand-in would crash."""
    from tests.fakes.cost_model import config_timing

    timing = config_timing(config, TP, SPEC_ALGORITHM)
    return None if timing is None else timing.tok_s()


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
    gave_up: bool  # the filter ended the search: 200 rejected suggestions in a row


class _GaveUp(logging.Handler):
    """Counts the filter's "no new configuration after N attempts" (the search ends there)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("no new configuration")


def run_search(space: Any, strategy: str, seed: int, budget: int, rounds: int, noise: float,
               optimum: float, out_dir: Path) -> Run:
    """One search, driven as Ray drives it, until ``budget`` trials or the search ends."""
    from tuner.search.build import build_search
    from tuner.spec import Objective

    search, failure_aware = STRATEGIES[strategy]
    objective = Objective(METRIC, "max", rounds)
    stack = build_search(space, objective, search=search, stage_search="random",
                         samples=budget, seed=seed, failure_aware=failure_aware,
                         max_concurrent=1, out_dir=out_dir)
    alg = stack.search_alg
    alg.set_search_properties(METRIC, "max", {})
    gave_up = _GaveUp()
    logging.getLogger("tuner.search.filtering").addHandler(gave_up)
    first = picked = None
    best_measured: tuple[float, float] | None = None  # (measured mean, truth)
    crashing = 0
    launched = 0
    for trial in range(budget):
        trial_id = f"t{trial:05d}"
        config = alg.suggest(trial_id)
        if config is None or config == "FINISHED":
            break  # FINISHED, or nothing to suggest with no trial running: the search ended
        launched += 1
        config = dict(config)
        crashing += config.get(CRASHING[0]) == CRASHING[1]
        truth = true_tok_s(config)
        if truth is None:
            alg.on_trial_complete(trial_id, error=True)
            stack.filtering.record_outcome(trial_id, config, CRASH_KIND)
            continue
        values = []
        result: dict[str, Any] = {}
        for index in range(rounds):
            values.append(truth * _noise(seed, trial, index, noise))
            result = {METRIC: values[-1], "round": index + 1, "training_iteration": index + 1,
                      "trial_id": trial_id}
            alg.on_trial_result(trial_id, result)
        alg.on_trial_complete(trial_id, result=result)
        stack.filtering.record_outcome(trial_id, config, None)
        mean = sum(values) / len(values)
        if best_measured is None or mean > best_measured[0]:
            best_measured = (mean, truth)
        if first is None and truth >= 0.98 * optimum:
            first = launched
        if picked is None and best_measured[1] >= 0.98 * optimum:
            picked = launched
    logging.getLogger("tuner.search.filtering").removeHandler(gave_up)
    memory = stack.filtering.memory
    ruled = [f"{e['knob']}={e['value']}" for e in memory.evidence()] if memory else []
    return Run(first, picked, launched, crashing, ruled, gave_up.count > 0)


def _median(values: Sequence[int | None], budget: int) -> tuple[float, str]:
    """The median with never-reached runs counted as the budget; shown '>N' when censored."""
    filled = [budget if v is None else v for v in values]
    value = float(statistics.median(filled))
    return value, (f">{budget}" if value >= budget else f"{value:g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=324,
                        help="trials per run at most (324: every point of bench+tree)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--spaces", nargs="+",
                        default=["bench", "bench+tree", "verify-campaign"])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES),
                        choices=list(STRATEGIES))
    args = parser.parse_args(argv)
    with_root_on_path()
    from tests.fakes.cost_model import optimum as find_optimum

    # "no new configuration after N attempts": counted below as a search that ended early
    logging.getLogger("tuner.search.filtering").propagate = False

    print(machine())
    print(f"{args.seeds} seeds, at most {args.budget} trials per run, {args.rounds} rounds "
          f"per trial, noise {args.noise:g}; searchers driven directly as Ray drives them")
    out_dir = Path(tempfile.mkdtemp(prefix="st-search-"))
    headline: dict[str, dict[str, tuple[float, str]]] = {}
    worst: dict[str, int] = {}  # strategy -> most launches of the crashing value in one run
    try:
        for space_name in args.spaces:
            space = load_space(space_name)
            _, best = find_optimum(space.domains, space.pins, TP, SPEC_ALGORITHM)
            valid = space.valid_size()
            within = _count_within(space, best)
            print(f"\nspace {space_name}: {space.size} points ({valid} valid), "
                  f"{len(space.stages)} stages; optimum {best:.1f} tok/s (model), "
                  f"{within} valid configs within 2%")
            print(f"  {'strategy':<10} {'first':>6} {'picked':>7}  {'per seed (first/picked)':<36}"
                  f" {'Tree launches':<16} ended gave-up  ruled out")
            headline[space_name] = {}
            for strategy in args.strategies:
                runs = [run_search(space, strategy, seed, args.budget, args.rounds,
                                   args.noise, best, out_dir) for seed in range(args.seeds)]
                first, first_text = _median([r.first for r in runs], args.budget)
                _, picked_text = _median([r.picked for r in runs], args.budget)
                headline[space_name][strategy] = (first, first_text)
                seeds = " ".join(f"{_show(r.first)}/{_show(r.picked)}" for r in runs)
                crashes = ",".join(str(r.crashing_launches) for r in runs)
                ended = sum(r.launched < args.budget for r in runs)
                gave_up = sum(r.gave_up for r in runs)
                ruled = sorted({x for r in runs for x in r.ruled_out})
                print(f"  {strategy:<10} {first_text:>6} {picked_text:>7}  {seeds:<36} "
                      f"{crashes:<16} {ended:>5} {gave_up:>7}  {', '.join(ruled) or '-'}")
                if any(r.crashing_launches for r in runs):
                    worst[strategy] = max(worst.get(strategy, 0),
                                          max(r.crashing_launches for r in runs))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    print()
    if worst:
        print(f"most launches of the always-crashing {CRASHING[0]}={CRASHING[1]} in one run: "
              + ", ".join(f"{k} {v}" for k, v in worst.items()))
    parts = []
    for space_name, table in headline.items():
        if "random" in table and "staged+fa" in table:
            (ours, ours_text), (theirs, theirs_text) = table["staged+fa"], table["random"]
            bound = "<" if theirs_text.startswith(">") and not ours_text.startswith(">") else ""
            parts.append(f"{space_name}: staged+failure-aware {ours_text} vs random "
                         f"{theirs_text} trials ({bound}{ours / theirs:.2f}x)")
    print("trials to within 2% of the optimum (median): " + "; ".join(parts))
    return 0


def _show(value: int | None) -> str:
    return "-" if value is None else str(value)


def _count_within(space: Any, best: float) -> int:
    count = 0
    for point in space.grid():
        if space.validate(point):
            continue
        value = true_tok_s(point)
        count += value is not None and value >= 0.98 * best
    return count


if __name__ == "__main__":
    raise SystemExit(main())
