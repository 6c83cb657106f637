"""The confirm stage's sequential rule (no Ray, no launches): which configuration to launch
next, and when a candidate is decided against the baseline.

Real servers differ from launch to launch far more than from round to round within a launch
(on the H200: ~20% against 4%), so the unit of evidence is a launch's mean. Launches of the
baseline and the open candidates alternate, the order reversed every other round (B c1 c2 |
c2 c1 B | B c1 c2 ...), so that a drift of the machine hits both sides alike. After each
round from ``MIN_LAUNCHES`` on, every open candidate is compared with the baseline on the
log scale (a ratio of launch means, Welch's interval): ``better`` or ``worse`` once the
interval leaves 1, ``tie`` once even the best the interval allows could not be told apart
at the cap; it then gets no more launches. The stage ends when no candidate is open, at the
cap, or at the time cap. Each look is held at 1 - alpha/looks (Bonferroni over the looks the
cap allows), so looking after every round does not inflate the false-win rate beyond alpha.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tuner.spec import CONFIRM_CAP
from tuner.stats import t_quantile

ALPHA = 0.05  # the chance of declaring a winner that is not one, over all looks
MIN_LAUNCHES = 3  # a configuration's first look: three launch means give a spread
# Launches per configuration at most (tuner.spec's default --confirm): a 25% difference at a
# 10% launch-to-launch sd (95% of launches within +-20% of their mean) is decided in >= 95% of
# stages (tests/tuner/decide/test_sequential.py simulates it).
DEFAULT_CAP = CONFIRM_CAP

Verdict = Literal["better", "worse", "tie", "open", "failed"]
DECIDED: frozenset[str] = frozenset({"better", "worse", "tie", "failed"})


@dataclass(frozen=True)
class Plan:
    """The stage's limits: launches per configuration (``cap``), its time (``time_s``, None:
    none) and the overall false-win rate. ``two_sided``: a candidate stays open while it could
    still be shown worse, too (the speculative reference: either answer is a decision); by
    default only while it could still be shown better."""

    cap: int = DEFAULT_CAP
    alpha: float = ALPHA
    time_s: float | None = None
    two_sided: bool = False

    @property
    def looks(self) -> int:
        return max(1, self.cap - MIN_LAUNCHES + 1)

    @property
    def confidence(self) -> float:
        """Each look's two-sided confidence."""
        return 1.0 - self.alpha / self.looks


@dataclass(frozen=True)
class Comparison:
    """A candidate against the baseline over their launch means: ``ratio`` is candidate /
    baseline with its interval at ``confidence``; ``spread``: the launch-to-launch sd of both
    sides pooled, as a fraction of the mean."""

    n: int
    n_baseline: int
    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    spread: float | None
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.ratio is None:
            return f"{self.verdict} (n={self.n} against {self.n_baseline})"
        span = "" if self.low is None else f" [{self.low:.3f}, {self.high:.3f}]"
        return (f"{self.ratio:.3f}x{span} at {self.confidence:.1%}, {self.n} launches against "
                f"{self.n_baseline}: {self.verdict}")


def _log_side(values: Sequence[float]) -> tuple[float, float, int]:
    logs = [math.log(v) for v in values]
    return statistics.fmean(logs), statistics.variance(logs) if len(logs) > 1 else 0.0, len(logs)


def compare(candidate: Sequence[float], baseline: Sequence[float], mode: str, plan: Plan,
            *, failed: bool = False) -> Comparison:
    """The candidate's verdict against the baseline from their launch means so far."""
    cand = [v for v in candidate if v is not None and math.isfinite(v)]
    base = [v for v in baseline if v is not None and math.isfinite(v)]
    if failed:
        return Comparison(len(cand), len(base), None, None, None, plan.confidence, None, "failed")
    if len(cand) < 2 or len(base) < 2 or min(cand + base) <= 0:
        at_cap = min(len(cand), len(base)) >= plan.cap
        return Comparison(len(cand), len(base), None, None, None, plan.confidence, None,
                          "tie" if at_cap else "open")
    mc, vc, nc = _log_side(cand)
    mb, vb, nb = _log_side(base)
    diff = mc - mb
    se2 = vc / nc + vb / nb
    spread = math.sqrt(((nc - 1) * vc + (nb - 1) * vb) / (nc + nb - 2))
    q = _quantile(plan.confidence, vc, nc, vb, nb)
    half = q * math.sqrt(se2)
    low, high = diff - half, diff + half
    sign = 1.0 if mode == "max" else -1.0
    gain_low, gain_high = sorted((sign * low, sign * high))
    if min(nc, nb) < MIN_LAUNCHES:
        verdict: Verdict = "open"
    elif gain_low > 0:
        verdict = "better"
    elif gain_high < 0:
        verdict = "worse"
    elif min(nc, nb) >= plan.cap or _futile(plan, gain_low, gain_high, vc, vb):
        verdict = "tie"  # even the best the interval allows would not separate at the cap
    else:
        verdict = "open"
    return Comparison(nc, nb, math.exp(diff), math.exp(low), math.exp(high), plan.confidence,
                      spread, verdict)


def _quantile(confidence: float, vc: float, nc: int, vb: float, nb: int) -> float:
    """Welch's t quantile (its degrees of freedom rounded down)."""
    a, b = vc / nc, vb / nb
    if a + b == 0:
        dof = nc + nb - 2
    else:
        dof = int((a + b) ** 2 / ((a * a / (nc - 1) if nc > 1 else 0) +
                                  (b * b / (nb - 1) if nb > 1 else 0) or 1e-300))
    return t_quantile(1 - (1 - confidence) / 2, max(1, min(dof, nc + nb - 2)))


def _futile(plan: Plan, gain_low: float, gain_high: float, vc: float, vb: float) -> bool:
    """Whether no value the interval allows would separate at the cap (in the better
    direction; with ``two_sided``, in neither)."""
    half = _half_at_cap(plan, vc, vb)
    return gain_high < half and (not plan.two_sided or -gain_low < half)


def _half_at_cap(plan: Plan, vc: float, vb: float) -> float:
    """The interval's half-width at the cap, were the spreads what they are now."""
    cap = plan.cap
    return t_quantile(1 - (1 - plan.confidence) / 2, 2 * cap - 2) * math.sqrt((vc + vb) / cap)


# ---------------------------------------------------------------- which launch is next


@dataclass
class Member:
    """One configuration of the stage (index 0: the baseline): its launch means so far,
    launches under way, launches lost to the environment, and a failure of its own."""

    label: str
    scores: list[float] = field(default_factory=list)
    pending: int = 0
    lost: int = 0
    failed: bool = False


def members_of(labels: Sequence[str], assigned: Mapping[str, int],
               outcomes: Mapping[str, tuple[str, float | None, str | None]],
               environmental: Collection[str], prior: Sequence[Sequence[float]] = ()
               ) -> list[Member]:
    """The members from the launches so far: ``assigned`` trial -> member index;
    ``outcomes`` trial -> (status, score, failure kind) of the launches that reported. A launch
    not ended yet is pending; one that failed for an ``environmental`` kind is lost (and made
    again); any other failure, or an ok launch without a score, is the member's own.
    ``prior``: launch means per member known beforehand (made elsewhere), counted first."""
    members = [Member(label, scores=list(prior[i]) if i < len(prior) else [])
               for i, label in enumerate(labels)]
    for tid, i in assigned.items():
        status, score, kind = outcomes.get(tid, ("running", None, None))
        if status in ("running", "interrupted"):
            members[i].pending += 1
        elif status == "ok" and score is not None:
            members[i].scores.append(score)
        elif status == "failed" and kind in environmental:
            members[i].lost += 1
        else:
            members[i].failed = True
    return members


def verdicts(members: Sequence[Member], mode: str, plan: Plan) -> list[Comparison]:
    """Each candidate's comparison with the baseline (members[0])."""
    base = members[0].scores
    return [compare(m.scores, base, mode, plan, failed=m.failed) for m in members[1:]]


def order(round_index: int, count: int) -> list[int]:
    """Members in launch order for a round: B c1 c2 ..., reversed every other round."""
    forward = list(range(count))
    return forward if round_index % 2 == 0 else forward[::-1]


def next_launch(members: Sequence[Member], mode: str, plan: Plan, elapsed_s: float = 0.0
                ) -> int | None:
    """The member to launch next, or None when the stage is over (no candidate open, the
    cap reached, the time cap passed, or the baseline itself failing)."""
    if plan.time_s is not None and elapsed_s >= plan.time_s:
        return None
    base = members[0]
    if base.failed or base.lost > plan.cap:
        return None
    open_ = [i + 1 for i, c in enumerate(verdicts(members, mode, plan))
             if c.verdict == "open" and members[i + 1].lost <= plan.cap]
    if not open_:
        return None
    counts = {i: len(members[i].scores) + members[i].pending for i in (0, *open_)}
    round_index = min(counts.values())
    if round_index >= plan.cap:
        return None
    return next(i for i in order(round_index, len(members))
                if i in counts and counts[i] == round_index)


def stop_reason(members: Sequence[Member], mode: str, plan: Plan, elapsed_s: float) -> str:
    """Why the stage stopped, in words (after ``next_launch`` said None)."""
    if members[0].failed:
        return "the baseline failed"
    if plan.time_s is not None and elapsed_s >= plan.time_s:
        return f"the time cap ({plan.time_s:.0f} s)"
    if all(c.verdict in DECIDED for c in verdicts(members, mode, plan)):
        return "every candidate decided"
    return f"the cap ({plan.cap} launches each)"


def launch_spread(launch_scores: Mapping[str, Sequence[float]]) -> float | None:
    """Launch-to-launch sd as a fraction of the mean, pooled over configurations (log scale)."""
    parts = [(len(v), statistics.variance([math.log(x) for x in v]))
             for v in launch_scores.values() if len(v) > 1 and min(v) > 0]
    dof = sum(n - 1 for n, _ in parts)
    return math.sqrt(sum((n - 1) * var for n, var in parts) / dof) if dof else None
