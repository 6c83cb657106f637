"""How many trials a search gets when ``--samples`` is not given, and about how long they take:
printed before the first launch. No Ray here."""

from __future__ import annotations

from dataclasses import dataclass

from search_spaces.space import SearchSpace
from tuner.output.readiness import duration

# After one sweep of every value, the default search gets a repeat sweep (as many trials again)
# and one round of its model phase's turns (auto_model.TURNS: a draw from anywhere, joint
# draws, TPE), at least MODEL_TRIALS_MIN in all: a repeat pass no longer eats the model phase.
MODEL_TRIALS_MIN = 12
MODEL_TURNS = 6  # len(auto_model.TURNS), held equal by tests/tuner/search/test_auto.py
# Seconds from launch to ready, and per benchmark round, of a typical trial; the estimate says
# it is one. sglang: a warm start took 55-68 s on an H200 (shared/reference/real-sglang.md),
# a round of a few requests seconds; the proxy: ready in 5.3 s on two H200s (BENCHMARKS.md,
# benchmarks.proxy_setup), a round of graph replays about a second.
TYPICAL_S = {"sglang": (60.0, 10.0), "proxy": (6.0, 1.0)}
# How far one node's start varies around the typical one: three warm sglang starts on one H200
# took 54.7, 57.5 and 68.1 s (real-sglang.md), a spread of about 22% of their mean.
START_SPREAD = 0.22


@dataclass(frozen=True)
class Budget:
    trials: int
    sweep: int  # one-at-a-time values
    model: int  # model-based trials
    why: str


def sweep_size(space: SearchSpace) -> int:
    """Trials of one sweep from the baseline: every value of every knob but the unset one."""
    return sum(len(values) - 1 for values in space.domains.values())


def sized_budget(space: SearchSpace) -> Budget:
    """The baseline, one sweep of every value, and as many trials again plus one round of
    the model phase's turns (at least MODEL_TRIALS_MIN) for a repeat sweep and the model;
    never more than the space's valid points."""
    sweep = sweep_size(space)
    model = max(MODEL_TRIALS_MIN, sweep + MODEL_TURNS)
    total = 1 + sweep + model
    valid = space.valid_size()
    if valid is not None and valid < total:
        return Budget(valid, sweep, max(0, valid - 1 - sweep),
                      f"every one of the space's {valid} valid points")
    return Budget(total, sweep, model, f"the baseline, {sweep} values of {len(space.domains)} "
                  f"knobs one at a time, {model} more")


def slowest_start(start: float, nodes: int) -> float:
    """A trial across ``nodes`` is ready when its slowest node is: the expected slowest of
    ``nodes`` starts spread evenly over START_SPREAD around ``start`` (the typical one);
    nothing added for the rendezvous between nodes (never measured on real nodes)."""
    return start * (1.0 + START_SPREAD * (nodes - 1) / (2.0 * (nodes + 1)))


def estimate(trials: int, rounds: int, workload: str | None, nodes: int = 1) -> str | None:
    """About how long ``trials`` take at a typical pace for the workload (None: no figure);
    ``nodes``: the nodes each trial spans (its start waits for the slowest)."""
    if workload not in TYPICAL_S:
        return None
    start, per_round = TYPICAL_S[workload]
    start = slowest_start(start, nodes)
    each = start + rounds * per_round
    placed = f" for the slowest of {nodes} nodes" if nodes > 1 else ""
    return (f"about {duration(trials * each)} at a typical {workload} trial's {each:.0f} s "
            f"({start:.0f} s to ready{placed}, {rounds} rounds of ~{per_round:.0f} s), one at "
            "a time")
