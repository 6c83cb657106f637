"""Running the confirm stage and the speculative reference (the statistics and verdicts are
``tuner.decide.confirm``'s): fresh launches of fixed points through the same trainable and
``fit()`` as the search, one whole-node trial per node at a time, journaled with phase
"confirm". Everything lands in DIR/confirm.json."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import ConcurrencyLimiter

from search_spaces.knobs import Value
from tuner.decide import confirm as decide
from tuner.decide import levels
from tuner.decide.decision import Decision
from tuner.output import confirm_text
from tuner.output.results import build_table, configs
from tuner.run.dashboard import reuse_actors
from tuner.run.fit import FitPlan, fit
from tuner.run.progress import TrialLines
from tuner.run.recorder import Recorder
from tuner.run.trainable import make_trainable
from tuner.search.fixed import FixedPoints
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
NO_SPECULATIVE = "no_speculative"  # the journal's variant of the reference launch


@dataclass
class Batch:
    """Trials of one fixed-point run: which point each trial ran, and whether it finished."""

    assigned: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False


def run_points(setup: Setup, spec: ExperimentSpec, resources: Mapping[str, float], slots: int,
               points: Sequence[Mapping[str, Value]], labels: Sequence[str], *, name: str,
               tags: Mapping[str, Any]) -> Batch:
    """Run the points as Ray trials of ``spec``'s trainable (whole-node, FIFO, no early
    stopping, at most ``slots`` at once), journaled with ``tags``."""
    objective = setup.objective
    out = setup.out_dir.resolve()
    searcher = FixedPoints(points, labels)
    recorder = Recorder(out, objective, setup.space.baseline(), tags=tags)
    reporter = TrialLines(objective.metric, list(setup.space.domains), spec.rounds,
                          stage_of=searcher.label_of, phase=str(tags.get("phase", name)))
    outcome = fit(FitPlan(
        name=name, storage=out, trainable=make_trainable(setup, spec, resources),
        objective=objective, search_alg=ConcurrencyLimiter(searcher, max_concurrent=slots),
        scheduler=FIFOScheduler(), num_samples=len(points), callbacks=[recorder],
        reporter=reporter, reuse_actors=reuse_actors(spec.reuse_actors)))
    interrupted = outcome.interrupted or outcome.trials < len(points)
    return Batch(dict(searcher.assigned), interrupted)


def run_stage(setup: Setup, resources: Mapping[str, float], slots: int, *, echo: Print
              ) -> dict[str, Any]:
    """Confirm (unless ``spec.confirm`` is 0) and the speculative reference; writes and
    returns confirm.json's content."""
    spec, objective = setup.spec, setup.objective
    out = setup.out_dir.resolve()
    done = confirm_text.load(out)
    if done is not None and not done.get("interrupted"):  # a resumed, already finished run
        return done
    baseline = setup.space.baseline()
    df = build_table(out, objective, baseline)
    cands = decide.candidates(df, configs(out), baseline, objective.mode, spec.confirm_top,
                              objective)
    data: dict[str, Any] = {"metric": objective.metric, "mode": objective.mode,
                            "repeats": spec.confirm, "top": spec.confirm_top,
                            "confidence": CONFIDENCE, "rounds_per_launch": spec.rounds,
                            "entries": [], "interrupted": False,
                            "limits": [lim.text() for lim in objective.limits],
                            "levels": list(objective.levels), "decide_at": objective.decide_at}
    decision: Decision | None = None
    if spec.confirm > 0 and len(cands) > 1:
        echo("")
        echo(f"confirm: {len(cands) - 1} best config(s) and the baseline, {spec.confirm} fresh "
             f"launches each, interleaved, no early stopping")
        points, labels, owner = decide.interleaved(cands, spec.confirm)
        points = [{**p, **setup.weights.pins(CONFIRM)} for p in points]  # the checkpoint's
        batch = run_points(setup, spec, resources, slots, points, labels, name=CONFIRM_DIR,
                           tags={"phase": "confirm"})
        df = build_table(out, objective, baseline)
        batch, data["relaunched"] = _relaunch_environmental(setup, resources, slots, points,
                                                            labels, batch, df, echo)
        data["interrupted"] = batch.interrupted
        if data["relaunched"]:
            df = build_table(out, objective, baseline)
        for i, cand in enumerate(cands):
            ids = [tid for tid, p in batch.assigned.items() if owner[p] == i]
            data["entries"].append(decide.summarize(cand, ids, df, objective))
        decision = decide.attach(decide.decide_confirmed(data["entries"], objective.metric,
                                                         objective.mode, spec.confirm), cands)
    elif spec.confirm > 0:
        data["note"] = "no configuration besides the baseline completed the search: nothing to confirm"
    decision = decision or levels.unconfirmed_at(df, cands, None, objective, spec.confirm)
    data["decision"] = decision.to_json()
    data["per_level"] = levels.per_level(objective, df, cands, data["entries"], spec.confirm)
    data.update(levels.same_winner(data["per_level"], objective.decide_at))
    if not data["interrupted"]:
        data["speculative"] = _speculative(setup, resources, slots, data, decision, echo)
    confirm_text.write(out, data)
    return data


def _relaunch_environmental(setup: Setup, resources: Mapping[str, float], slots: int,
                            points: Sequence[Mapping[str, Value]], labels: Sequence[str],
                            batch: Batch, df: pd.DataFrame, echo: Print
                            ) -> tuple[Batch, list[dict[str, str]]]:
    """Launch once more each confirm point whose launch failed for a reason that says nothing
    about its configuration (RELAUNCHED: a busy port or GPU, a lost node). One such failure
    would leave its candidate a launch short and the decision unconfirmed. The failed trials
    stay in the journal; the candidates are judged on the relaunches. Returns the batch to
    judge and what was relaunched (trial, kind). ``df``: the results table after ``batch``."""
    if batch.interrupted:
        return batch, []
    kinds = ({str(t): str(k) for t, k in zip(df["trial_id"], df["failure_kind"], strict=True)}
             if "failure_kind" in df else {})
    again = [(tid, p) for tid, p in batch.assigned.items() if kinds.get(tid) in RELAUNCHED]
    if not again:
        return batch, []
    echo(f"confirm: {len(again)} launch(es) failed for a reason outside the configuration ("
         + ", ".join(f"{tid}: {kinds[tid]}" for tid, _ in again) + "): launched once more")
    retry = run_points(setup, setup.spec, resources, slots, [points[p] for _, p in again],
                       [f"{labels[p]} (again)" for _, p in again], name=f"{CONFIRM_DIR}-again",
                       tags={"phase": "confirm"})
    failed = {tid for tid, _ in again}
    assigned = {tid: p for tid, p in batch.assigned.items() if tid not in failed}
    assigned.update({tid: again[i][1] for tid, i in retry.assigned.items()})
    return Batch(assigned, retry.interrupted), [{"trial_id": t, "kind": kinds[t]}
                                                for t, _ in again]


def _speculative(setup: Setup, resources: Mapping[str, float], slots: int,
                 data: dict[str, Any], decision: Decision, echo: Print) -> dict[str, Any] | None:
    """One launch of the decided settings with speculative decoding off, and the verdict."""
    spec, objective = setup.spec, setup.objective
    args = spec.workload.without_speculative()
    if args is None or decision.config is None:
        return None
    if re.sub(r"_c\d+$", "", objective.metric) in setup.workload.speculative_metrics:
        return {"text": f"no reference run without speculative decoding: {objective.metric} "
                        "exists only with it on", "pays_off": None, "with": None,
                "without": None, "reference_trial": None}
    echo("")
    echo(f"speculative decoding: one launch of the {decision.label} settings with it off")
    ref_spec = spec.model_copy(update={"workload": args})
    config = decide.without_speculative_knobs(decision.config)
    batch = run_points(setup, ref_spec, resources, slots,
                       [{**config, **setup.weights.pins(CONFIRM)}], ["no speculative"],
                       name=REFERENCE_DIR, tags={"phase": "confirm", "variant": NO_SPECULATIVE})
    if batch.interrupted:
        data["interrupted"] = True
    df = build_table(setup.out_dir.resolve(), objective, setup.space.baseline())
    rows = df[df["trial_id"].isin(list(batch.assigned))] if not df.empty else df
    ref = rows.iloc[0].to_dict() if len(rows) else None
    entry = next((e for e in data["entries"] if e["label"] == decision.label), None)
    with_iv = decide.entry_interval(entry) if entry else None
    with_score = finite(entry["search_score"]) if entry else \
        decide.search_score(df, decision.source_trial)
    verdict = decide.speculative_verdict(with_iv, with_score, ref, objective.metric,
                                         objective.mode)
    verdict["algorithm"] = spec.workload.speculative_label()
    verdict["config"] = config
    return verdict
