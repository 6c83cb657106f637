"""Running the confirm stage and the speculative reference (the statistics and verdicts are
``tuner.decide.confirm``'s): fresh launches of fixed points through the same trainable and
``fit()`` as the search, one whole-node trial per node at a time, journaled with phase
"confirm". The confirm stage and the reference launch by the sequential rule
(``tuner.decide.sequential``): alternating, until decided. Everything lands in
DIR/confirm.json."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import ConcurrencyLimiter

from search_spaces.composite import without_weights
from search_spaces.knobs import Value
from tuner.decide import confirm as decide
from tuner.decide import levels, sequential
from tuner.decide.decision import Decision
from tuner.decide.sequential import Member, Plan
from tuner.output import confirm_text
from tuner.record.confirm import ConfirmRecord
from tuner.record.events import NO_SPECULATIVE, WITH_SPECULATIVE
from tuner.record.experiment import Experiment
from tuner.record.rows import ResultRow
from tuner.run.dashboard import reuse_actors
from tuner.run.fit import FitPlan, fit
from tuner.run.progress import TrialLines
from tuner.run.recorder import Recorder
from tuner.run.trainable import make_trainable
from tuner.search.adaptive import AdaptivePoints
from tuner.search.memory import ENVIRONMENTAL
from tuner.setup import Print, Setup
from tuner.spec import ExperimentSpec
from tuner.stats import CONFIDENCE, finite
from tuner.weights import CONFIRM

# Failure kinds that say nothing about the configuration and may not recur: launched again
# (not_modelled says nothing about it either, but would recur).
RELAUNCHED = ENVIRONMENTAL - {"not_modelled"}
CONFIRM_DIR = "confirm"  # Ray's own files of the confirm trials (ours stay in DIR/<trial id>)
REFERENCE_DIR = "reference"
WITH_SPECULATIVE_DIR = "reference-with"


@dataclass
class Batch:
    """Trials of one fixed-point run: which point each trial ran, and whether it finished."""

    assigned: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    stopped: str | None = None  # why a sequential run stopped launching
    handoff: int | None = None  # the point the rule asked for next, launched by another run


def _fit(setup: Setup, spec: ExperimentSpec, resources: Mapping[str, float], slots: int,
         searcher: AdaptivePoints, samples: int, *, name: str,
         tags: Mapping[str, Any]) -> bool:
    """Run ``searcher``'s points as Ray trials of ``spec``'s trainable (whole-node, FIFO, no
    early stopping, at most ``slots`` at once), journaled with ``tags``; True when the run was
    interrupted."""
    objective = setup.objective
    out = setup.out_dir.resolve()
    recorder = Recorder(out, objective, setup.space.baseline(), tags=tags)
    reporter = TrialLines(objective.metric, list(setup.space.domains), spec.rounds,
                          stage_of=searcher.label_of, phase=str(tags.get("phase", name)))
    outcome = fit(FitPlan(
        name=name, storage=out, trainable=make_trainable(setup, spec, resources),
        objective=objective, search_alg=ConcurrencyLimiter(searcher, max_concurrent=slots),
        scheduler=FIFOScheduler(), num_samples=samples, callbacks=[recorder],
        reporter=reporter, reuse_actors=reuse_actors(spec.reuse_actors)))
    return outcome.interrupted


def run_sequence(setup: Setup, spec: ExperimentSpec, resources: Mapping[str, float],
                 slots: int, points: Sequence[Mapping[str, Value]], labels: Sequence[str],
                 plan: Plan, *, name: str, tags: Mapping[str, Any],
                 prior: Sequence[Sequence[float]] = (),
                 launched: Collection[int] | None = None) -> Batch:
    """Launch the points by the sequential rule (``sequential.next_launch``: point 0 is the
    baseline) until every other point is decided, the cap or the time cap. ``prior``: launch
    means known beforehand, per point, that count as its first launches. ``launched``: the
    points this run launches (default: all); when the rule asks for another, the run ends
    with that point as its ``handoff`` (another run, of another workload, launches it).
    Launches of these points that an interrupted run already ended (the journal's trials of
    the same phase and variant) count too: a resumed stage goes on, it does not start over."""
    objective = setup.objective
    started = time.monotonic()
    state: dict[str, Any] = {}
    here = set(range(len(points)) if launched is None else launched)

    def members(assigned: Mapping[str, int]) -> list[Member]:
        rows = _rows(setup) if assigned else ()
        outcomes = {r.trial_id: (r.status, finite(r.score), r.failure_kind) for r in rows}
        return sequential.members_of(labels, assigned, outcomes, RELAUNCHED, prior)

    def choose(assigned: Mapping[str, int]) -> int | None:
        ms, elapsed = members(assigned), time.monotonic() - started
        nxt = sequential.next_launch(ms, objective.mode, plan, elapsed)
        if nxt is None:
            state["stopped"] = sequential.stop_reason(ms, objective.mode, plan, elapsed)
        elif nxt not in here:
            state["handoff"] = nxt
            return None
        return nxt

    searcher = AdaptivePoints(points, labels, choose, plan.cap)
    searcher.assigned.update(_ended_before(setup, points, tags, never=set(range(len(points))) - here))
    # Every point may lose launches to its environment: room for as many again.
    interrupted = _fit(setup, spec, resources, slots, searcher, 2 * plan.cap * len(points) + 2,
                       name=name, tags=tags)
    done = searcher.finished and not interrupted
    return Batch(dict(searcher.assigned), not done, state.get("stopped"), state.get("handoff"))


def _ended_before(setup: Setup, points: Sequence[Mapping[str, Value]],
                  tags: Mapping[str, Any], never: Collection[int] = ()) -> dict[str, int]:
    """Trials an earlier run of this stage ended, by the point they ran (matched on the
    journal's phase, variant and config; the points in ``never`` are not launched by this
    run): trial id -> point index."""
    rows, ran = _rows(setup), _settings(setup)
    wanted = [{"<never launched>": True} if i in never else without_weights(p)
              for i, p in enumerate(points)]
    variant = tags.get("variant")
    found: dict[str, int] = {}
    for row in rows:
        if row.phase != tags.get("phase") or row.variant != variant or \
                row.status in ("running", "interrupted"):
            continue
        config = ran.get(row.trial_id)
        if config in wanted:
            found[row.trial_id] = wanted.index(config)
    return found


def _rows(setup: Setup) -> tuple[ResultRow, ...]:
    """The results rows as the journal has them now."""
    return Experiment.journal(setup.out_dir.resolve()).rows(setup.objective,
                                                            setup.space.baseline())


def _settings(setup: Setup) -> dict[str, dict[str, Value]]:
    """Every trial's settings as the journal has them now."""
    return Experiment.journal(setup.out_dir.resolve()).settings()


def run_stage(setup: Setup, resources: Mapping[str, float], slots: int, *, echo: Print
              ) -> ConfirmRecord:
    """Confirm (unless ``spec.confirm`` is 0) and the speculative reference; writes and
    returns confirm.json's record."""
    spec, objective = setup.spec, setup.objective
    out = setup.out_dir.resolve()
    done = confirm_text.load(out)
    if done is not None and not done.interrupted:  # a resumed, already finished run
        return done
    baseline = setup.space.baseline()
    exp = Experiment.journal(out)
    rows = exp.rows(objective, baseline)
    cands = decide.candidates(rows, exp.settings(), baseline, objective.mode,
                              spec.confirm_top, objective, setup.spread)
    plan = Plan(cap=max(spec.confirm, 1), time_s=spec.confirm_time)
    data: dict[str, Any] = {"metric": objective.metric, "mode": objective.mode,
                            "repeats": spec.confirm, "cap": spec.confirm, "top": spec.confirm_top,
                            "confidence": CONFIDENCE, "look_confidence": plan.confidence,
                            "rounds_per_launch": spec.rounds, "entries": [],
                            "interrupted": False,
                            "limits": [lim.text() for lim in objective.limits],
                            "levels": list(objective.levels), "decide_at": objective.decide_at}
    decision: Decision | None = None
    if spec.confirm > 0 and len(cands) > 1:
        echo("")
        echo(f"confirm: {len(cands) - 1} candidate(s) against the baseline, fresh launches "
             f"alternating until each is decided (at most {plan.cap} each"
             + (f", {plan.time_s:.0f} s" if plan.time_s else "") + ")")
        points = [{**c.config, **setup.weights.pins(CONFIRM)} for c in cands]  # the checkpoint's
        batch = run_sequence(setup, spec, resources, slots, points, [c.label for c in cands],
                             plan, name=CONFIRM_DIR, tags={"phase": "confirm"})
        rows = _rows(setup)
        data["interrupted"], data["stopped"] = batch.interrupted, batch.stopped
        for i, cand in enumerate(cands):
            ids = [tid for tid, p in batch.assigned.items() if p == i]
            data["entries"].append(decide.summarize(cand, ids, rows, objective, RELAUNCHED))
        data["relaunched"] = [lost for e in data["entries"] for lost in e["lost"]]
        data.update(_spreads(out, data["entries"], objective.metric))
        data["comparisons"] = {label: {**c.to_json(), "text": c.text()} for label, c in
                               decide.comparisons(data["entries"], objective.mode, plan).items()}
        decision = decide.attach(decide.decide_confirmed(
            data["entries"], objective.metric, objective.mode, plan, batch.stopped), cands)
    elif spec.confirm > 0:
        data["note"] = "no configuration besides the baseline completed the search: nothing to confirm"
    decision = decision or levels.unconfirmed_at(rows, cands, None, objective, spec.confirm)
    data["decision"] = decision.to_json()
    data["per_level"] = levels.per_level(objective, rows, cands, data["entries"], spec.confirm)
    data.update(levels.same_winner(data["per_level"], objective.decide_at))
    if not data["interrupted"]:
        data["speculative"] = _speculative(setup, resources, slots, data, decision, plan, echo)
    return confirm_text.write(out, data)


def _spreads(out: Path, entries: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """The launch-to-launch spread of the confirm launches beside the within-launch one (the
    rounds of one launch), each as a fraction of the mean."""
    launches = {str(e["label"]): [v for v in e["scores"] if v is not None] for e in entries}
    trials = Experiment.journal(out).trials
    rounds = {tid: [v for r in trials[tid].rounds if (v := finite(r.get(metric))) is not None]
              for e in entries for tid in e["trials"] if tid in trials}
    return {"launch_spread": sequential.launch_spread(launches),
            "round_spread": sequential.launch_spread(rounds)}


def _speculative(setup: Setup, resources: Mapping[str, float], slots: int,
                 data: dict[str, Any], decision: Decision, plan: Plan, echo: Print
                 ) -> dict[str, Any] | None:
    """The decided settings launched with speculative decoding off, by the same sequential
    rule against their launches with it on (the confirm stage's, and more while the answer
    is open), and the verdict."""
    spec, objective = setup.spec, setup.objective
    args = spec.workload.without_speculative()
    if args is None or decision.config is None:
        return None
    if re.sub(r"_c\d+$", "", objective.metric) in setup.workload.speculative_metrics:
        return {"text": f"no reference run without speculative decoding: {objective.metric} "
                        "exists only with it on", "pays_off": None, "with": None,
                "without": None, "reference_trial": None}
    entry = next((e for e in data["entries"] if e["label"] == decision.label), None)
    searched = decide.search_score(_rows(setup), decision.source_trial)
    with_scores = [v for v in entry["scores"] if v is not None] if entry else \
        ([] if searched is None else [searched])
    ref_plan = Plan(cap=plan.cap if spec.confirm else 1, alpha=plan.alpha, time_s=plan.time_s,
                    two_sided=True)
    echo("")
    echo(f"speculative decoding: the {decision.label} settings with it off, launched until "
         f"the difference is decided (at most {ref_plan.cap})")
    config = decide.without_speculative_knobs(decision.config)
    pins = setup.weights.pins(CONFIRM)
    points = [{**decision.config, **pins}, {**config, **pins}]
    labels = [f"{decision.label} (speculative on)", "no speculative"]
    batches = _alternate(setup, [spec, spec.model_copy(update={"workload": args})], resources,
                         slots, points, labels, ref_plan, with_scores)
    if batches.interrupted:
        data["interrupted"] = True
    rows = [r for r in _rows(setup) if r.trial_id in batches.assigned]
    again = [r for r in rows if batches.assigned[r.trial_id] == 0]
    rows = [r for r in rows if batches.assigned[r.trial_id] == 1]
    with_scores += [r.score for r in again if r.done and r.score is not None]
    ok = [r.score for r in rows if r.done and r.score is not None]
    own = [r for r in rows if r.status == "failed" and r.failure_kind not in RELAUNCHED]
    failed = None if not own else str(own[0].failure_kind or "failed")
    if not rows:
        failed = "not run"
    verdict = decide.speculative_verdict(with_scores, ok, objective.metric, objective.mode,
                                         ref_plan, failed)
    verdict["with_trials"] = [r.trial_id for r in again]
    verdict["reference_trials"] = [r.trial_id for r in rows]
    verdict["reference_trial"] = rows[0].trial_id if rows else None
    verdict["stopped"] = batches.stopped
    verdict["algorithm"] = spec.workload.speculative_label()
    verdict["config"] = config
    return verdict


def _alternate(setup: Setup, specs: Sequence[ExperimentSpec], resources: Mapping[str, float],
               slots: int, points: Sequence[Mapping[str, Value]], labels: Sequence[str],
               plan: Plan, prior: Sequence[float]) -> Batch:
    """The decided settings with speculative decoding on (point 0, ``specs[0]``'s workload;
    ``prior``: its confirm launches) and off (point 1, ``specs[1]``'s) by the sequential rule,
    each side's launches a run of its own workload: the reference is launched until the rule
    asks for the decided settings again (a noisy launch among the few they had), then those,
    and so on. Returns every launch of both sides (trial -> point)."""
    tags = [{"phase": "confirm", "variant": WITH_SPECULATIVE},
            {"phase": "confirm", "variant": NO_SPECULATIVE}]
    names = [WITH_SPECULATIVE_DIR, REFERENCE_DIR]
    every = _ended_before(setup, points, tags[0], never={1})  # an interrupted run's, resumed
    side, runs = 1, 0
    while True:
        others = [r.score for r in _rows(setup) if every.get(r.trial_id) == 1 - side
                  and r.done and r.score is not None]
        prior_of = [[*prior, *others], []] if side == 1 else [list(prior), others]
        runs += 1
        batch = run_sequence(setup, specs[side], resources, slots, points, labels, plan,
                             name=names[side] if runs <= 2 else f"{names[side]}-{runs}",
                             tags=tags[side], prior=prior_of, launched={side})
        every.update(batch.assigned)
        # each run launches at least once before it hands off: at most 2 x cap runs
        if batch.interrupted or batch.handoff is None or runs >= 2 * plan.cap + 1:
            return Batch(every, batch.interrupted, batch.stopped)
        side = batch.handoff
