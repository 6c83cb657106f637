"""The confirm stage's sequential rule: t quantiles, the comparison of launch means, the
alternating order, and its error rates simulated over many stages (launch means drawn with a
launch-to-launch sd as real servers show; no Ray, no launches)."""

from __future__ import annotations

import math
import random

import pytest

from tuner.decide.sequential import (
    DEFAULT_CAP,
    Member,
    Plan,
    compare,
    launch_spread,
    members_of,
    next_launch,
    order,
    verdicts,
)
from tuner.stats import t_cdf, t_quantile


@pytest.mark.parametrize(("p", "df", "expected"), [
    (0.975, 1, 12.706), (0.975, 4, 2.776), (0.995, 10, 3.169), (0.9975, 18, 3.197),
    (0.95, 30, 1.697), (0.6, 7, 0.263)])
def test_t_quantile_matches_published_tables(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=2e-3)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_quantile(1 - p, df) == pytest.approx(-t_quantile(p, df))


def test_compare_says_better_worse_and_open_by_mode() -> None:
    plan = Plan(cap=10)
    base = [100.0, 102.0, 98.0]
    assert compare([130.0, 131.0, 129.0], base, "max", plan).verdict == "better"
    assert compare([130.0, 131.0, 129.0], base, "min", plan).verdict == "worse"
    assert compare([70.0, 71.0, 69.0], base, "min", plan).verdict == "better"
    assert compare([130.0, 131.0], base, "max", plan).verdict == "open"  # 2 launches: no look
    assert compare([101.0, 97.0, 103.0], base, "max", plan).verdict in ("open", "tie")
    c = compare([130.0, 131.0, 129.0], base, "max", plan)
    assert c.ratio == pytest.approx(1.30, abs=0.01) and c.low is not None and c.low > 1
    assert compare([130.0] * 3, base, "max", plan, failed=True).verdict == "failed"


def test_a_tie_is_declared_when_even_the_best_the_interval_allows_cannot_separate() -> None:
    plan = Plan(cap=4)
    same = [100.0, 110.0, 90.0, 105.0]
    assert compare([104.0, 96.0, 108.0, 92.0], same, "max", plan).verdict == "tie"  # at the cap
    # Before the cap: a candidate whose interval's best is below what the cap could resolve.
    base8 = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8]
    assert compare([99.0, 100.0, 98.0, 99.5, 98.5, 99.2, 98.8], base8, "max",
                   Plan(cap=8)).verdict in ("tie", "worse")
    assert compare([100.0, 101.0, 99.0], [100.0, 110.0, 90.0], "max", Plan(cap=40)).verdict == \
        "open"


def test_the_order_alternates_and_reverses_every_other_round() -> None:
    assert order(0, 3) == [0, 1, 2] and order(1, 3) == [2, 1, 0]
    members = [Member("baseline"), Member("top 1"), Member("top 2")]
    plan, picked = Plan(cap=3), []
    for _ in range(6):
        i = next_launch(members, "max", plan)
        assert i is not None
        picked.append(i)
        members[i].scores.append(100.0 + len(picked))
    assert picked == [0, 1, 2, 2, 1, 0]


def test_members_of_counts_pending_lost_and_own_failures() -> None:
    assigned = {"a": 0, "b": 1, "c": 1, "d": 1, "e": 0}
    outcomes = {"a": ("ok", 100.0, None), "b": ("failed", None, "port_busy"),
                "c": ("ok", 120.0, None), "d": ("failed", None, "cuda_oom")}
    base, cand = members_of(["baseline", "top 1"], assigned, outcomes, {"port_busy"})
    assert (base.scores, base.pending, base.failed) == ([100.0], 1, False)
    assert (cand.scores, cand.lost, cand.failed) == ([120.0], 1, True)


def test_the_time_cap_and_a_failing_baseline_end_the_stage() -> None:
    members = [Member("baseline"), Member("top 1")]
    assert next_launch(members, "max", Plan(time_s=60), elapsed_s=61) is None
    members[0].failed = True
    assert next_launch(members, "max", Plan()) is None


def _stage(effect: float, sd: float, rng: random.Random, plan: Plan,
           second: float | None = None) -> tuple[str, int]:
    """One simulated confirm stage: the first candidate's verdict and the launches made."""
    means = [1.0, effect] + ([second] if second is not None else [])
    members = [Member(f"m{i}") for i in range(len(means))]
    launches = 0
    while (i := next_launch(members, "max", plan)) is not None:
        members[i].scores.append(200.0 * means[i] * math.exp(rng.gauss(0.0, sd)))
        launches += 1
    return verdicts(members, "max", plan)[0].verdict, launches


def test_a_25_percent_win_at_real_launch_noise_is_confirmed_and_a_2_percent_one_is_not() -> None:
    """Issue 30's bar: launches spread with sd 10% (95% of launches within +-20% of their
    mean, as the H200's baseline did: 258.6 then 184.9): a candidate 25% faster is confirmed
    in >= 95% of stages within the default cap, one 2% faster in <= 5%."""
    rng, plan, runs = random.Random(30), Plan(cap=DEFAULT_CAP), 200
    wins = [_stage(1.25, 0.10, rng, plan) for _ in range(runs)]
    assert sum(v == "better" for v, _ in wins) >= 0.95 * runs
    assert max(n for _, n in wins) <= 2 * DEFAULT_CAP
    close = [_stage(1.02, 0.10, rng, plan, second=1.0) for _ in range(runs)]
    assert sum(v == "better" for v, _ in close) <= 0.05 * runs
    big = [_stage(1.60, 0.10, rng, plan) for _ in range(runs)]  # larger differences sooner
    assert sum(n for _, n in big) / runs < sum(n for _, n in wins) / runs


def test_launch_spread_pools_the_log_sd_of_each_configuration() -> None:
    assert launch_spread({"a": [100.0, 100.0], "b": [50.0]}) == 0.0
    spread = launch_spread({"a": [90.0, 110.0], "b": [180.0, 220.0]})
    assert spread == pytest.approx(abs(math.log(110 / 90)) / math.sqrt(2), rel=1e-9)
    assert launch_spread({"a": [1.0]}) is None


def test_the_speculative_reference_stays_open_while_either_answer_is_possible() -> None:
    """The stand-in's reference stopped at 3 launches, 'open': without it could no longer be
    shown better, yet it could still be shown worse. Two-sided, it goes on."""
    with_it = [112.4, 246.3, 253.2, 222.2, 248.7]  # the stand-in's launches, one of them slow
    without = [130.1, 140.2, 113.0]
    one_sided = Plan(cap=5)
    assert compare(without, with_it, "max", one_sided).verdict == "tie"
    members = [Member("with", scores=with_it), Member("without", scores=without)]
    assert next_launch(members, "max", one_sided) is None
    assert next_launch(members, "max", Plan(cap=5, two_sided=True)) == 1
