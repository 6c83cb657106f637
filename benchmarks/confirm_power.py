"""How often the confirm stage's sequential rule confirms a candidate, and after how many
launches, simulated: launch means drawn as ``mean * exp(N(0, sd))`` for the baseline and one
or two candidates, through the stage's own code (``tuner.decide.sequential``: the order, the
looks, the stop). No Ray, no launches: the statistic alone.

    python -m benchmarks.confirm_power [--stages 400] [--cap 10]
"""

from __future__ import annotations

import argparse
import math
import random

from benchmarks._common import machine
from tuner.decide.sequential import Member, Plan, next_launch, verdicts

SDS = (0.05, 0.10, 0.15, 0.20)
EFFECTS = (1.02, 1.10, 1.25, 1.50)


def stage(effect: float, sd: float, plan: Plan, rng: random.Random) -> tuple[str, int]:
    """One stage: the candidate's verdict and the launches made (both sides)."""
    means = (1.0, effect)
    members = [Member("baseline"), Member("candidate")]
    launches = 0
    while (i := next_launch(members, "max", plan)) is not None:
        members[i].scores.append(100.0 * means[i] * math.exp(rng.gauss(0.0, sd)))
        launches += 1
    return verdicts(members, "max", plan)[0].verdict, launches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, default=400)
    p.add_argument("--cap", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    plan = Plan(cap=args.cap)
    print(machine())
    print(f"confirm stage, cap {args.cap} launches each, {args.stages} simulated stages a cell: "
          "how often the candidate is confirmed, and the launches made (both sides)")
    print("| launch sd | " + " | ".join(f"{e:.2f}x: confirmed, launches" for e in EFFECTS) + " |")
    print("|---|" + "---|" * len(EFFECTS))
    for sd in SDS:
        cells = []
        for effect in EFFECTS:
            rng = random.Random(f"{args.seed}/{sd}/{effect}")
            runs = [stage(effect, sd, plan, rng) for _ in range(args.stages)]
            confirmed = sum(v == "better" for v, _ in runs) / len(runs)
            mean = sum(n for _, n in runs) / len(runs)
            cells.append(f"{confirmed:.1%}, {mean:.1f}")
        print(f"| {sd:.2f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
