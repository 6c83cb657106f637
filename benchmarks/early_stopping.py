"""Early stopping: ASHA versus FIFO on the same 32 configurations, over 5 seeds.

What runs: real Ray Tune with servetune's own searcher and scheduler
(``tuner.search.build_search`` random search, ``build_scheduler("asha" | "fifo")``), one
trial at a time as servetune runs them (a trial holds a whole node). The trainable does not
launch the stand-in: each round it evaluates the stand-in's cost model
(``simulator/cost_model.py``, the model behind the stand-in's timing) for the trial's
config and multiplies it by ``1 + noise * N(0, 1)``. This measures the scheduler, not
process launching (that is ``benchmarks.overhead``). The noise of a (seed, config, round) is
fixed, so ASHA and FIFO see the same measurement for every round they both run.

Per seed: the random searcher with that seed picks the baseline and 31 valid configs of
the space (the same 32 for both schedulers). Reported:
- rounds saved: 1 - rounds ASHA ran / rounds FIFO ran (32 x rounds);
- best found: ASHA's best (the best mean among trials that ran every round, as servetune
  picks it) is FIFO's best config.

    python -m benchmarks.early_stopping [--seeds 5] [--rounds 4 8] [--noise 0.02]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import machine, with_root_on_path

SPEC_ALGORITHM = "EAGLE3"
TP = 8


def round_noise(seed: int, config: dict[str, Any], index: int, noise: float) -> float:
    """The multiplicative noise of one round: fixed by (seed, config, round)."""
    from tuner.search.keys import config_key

    digest = hashlib.sha256(f"{seed}|{config_key(config)}|{index}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return max(0.1, 1.0 + noise * rng.gauss(0.0, 1.0))


def true_tok_s(config: dict[str, Any]) -> float | None:
    from simulator.cost_model import config_timing

    timing = config_timing(config, TP, SPEC_ALGORITHM)
    return None if timing is None else timing.tok_s()


def cost_model_trial(config: dict[str, Any], rounds: int, noise: float, seed: int) -> None:
    """The trainable: one cost-model evaluation (with noise) per round, reported per round."""
    from ray import tune

    value = true_tok_s(config)
    if value is None:
        raise RuntimeError("this configuration crashes the stand-in at startup")
    for index in range(rounds):
        tune.report({"output_throughput": value * round_noise(seed, config, index, noise),
                     "round": index + 1})


@dataclass
class Outcome:
    rounds_run: int
    best_key: str | None
    best_true: float | None
    configs: list[str]


def run_once(scheduler: str, space_name: str, seed: int, samples: int, rounds: int,
             noise: float, storage: Path) -> Outcome:
    from ray import tune

    from search_spaces.space import load
    from tuner.search.build import build_scheduler, build_search
    from tuner.search.keys import config_key
    from tuner.spec import Objective

    space = load(space_name)
    objective = Objective("output_throughput", "max", rounds)
    stack = build_search(space, objective, search="random", stage_search="random",
                         samples=samples, seed=seed, failure_aware=True, max_concurrent=1,
                         out_dir=storage)
    per_trial: dict[str, list[float]] = {}
    config_of: dict[str, dict[str, Any]] = {}

    class Rounds(tune.Callback):
        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                            result: dict[str, Any], **info: Any) -> None:
            per_trial.setdefault(trial.trial_id, []).append(float(result["output_throughput"]))
            config_of[trial.trial_id] = dict(trial.config)

    trainable = tune.with_resources(
        tune.with_parameters(cost_model_trial, rounds=rounds, noise=noise, seed=seed),
        {"cpu": 1, "gpu": TP})
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric="output_throughput", mode="max", num_samples=samples,
                                    search_alg=stack.search_alg, reuse_actors=True,
                                    scheduler=build_scheduler(scheduler, objective)),
        run_config=tune.RunConfig(name=f"{scheduler}-{seed}", storage_path=str(storage),
                                  verbose=0, callbacks=[Rounds()]))
    with contextlib.redirect_stdout(io.StringIO()):
        tuner.fit()
    complete = {t: sum(v) / len(v) for t, v in per_trial.items() if len(v) >= rounds}
    best = max(complete, key=lambda t: complete[t]) if complete else None
    best_key = config_key(config_of[best]) if best else None
    return Outcome(rounds_run=sum(len(v) for v in per_trial.values()), best_key=best_key,
                   best_true=true_tok_s(config_of[best]) if best else None,
                   configs=sorted(config_key(c) for c in config_of.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--rounds", type=int, nargs="+", default=[4, 6, 8],
                        help="rounds per trial (servetune's default is 6)")
    parser.add_argument("--noise", type=float, default=0.02,
                        help="per-round multiplicative noise sd (the stand-in's default)")
    parser.add_argument("--space", default="verify-campaign")
    args = parser.parse_args(argv)
    with_root_on_path()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    print(machine())
    print(f"space {args.space}, {args.samples} configs per seed (baseline + random), "
          f"noise {args.noise:g}, seeds 0..{args.seeds - 1}; Ray Tune, one trial at a time")
    import ray

    storage = Path(tempfile.mkdtemp(prefix="st-early-"))
    headline = []
    ray.init(num_cpus=2, num_gpus=TP, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        for rounds in args.rounds:
            saved, found = [], 0
            for seed in range(args.seeds):
                fifo = run_once("fifo", args.space, seed, args.samples, rounds, args.noise,
                                storage)
                asha = run_once("asha", args.space, seed, args.samples, rounds, args.noise,
                                storage)
                if fifo.configs != asha.configs:
                    raise RuntimeError(f"seed {seed}: ASHA and FIFO ran different configs")
                fraction = 1.0 - asha.rounds_run / fifo.rounds_run
                hit = asha.best_key == fifo.best_key
                saved.append(fraction)
                found += hit
                print(f"rounds {rounds} seed {seed}: FIFO ran {fifo.rounds_run} rounds, ASHA "
                      f"{asha.rounds_run} ({fraction:.0%} saved); best: FIFO "
                      f"{fifo.best_true:.1f} tok/s (model), ASHA {asha.best_true:.1f}"
                      f" -> {'same config' if hit else 'DIFFERENT config'}")
            mean = sum(saved) / len(saved)
            print(f"rounds {rounds}: {mean:.0%} of rounds saved (min {min(saved):.0%}, max "
                  f"{max(saved):.0%}); ASHA found FIFO's best in {found} of {args.seeds} seeds")
            headline.append(f"{mean:.0%} saved, best found {found}/{args.seeds} "
                            f"at {rounds} rounds")
    finally:
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    print("early stopping (ASHA vs FIFO): " + "; ".join(headline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
