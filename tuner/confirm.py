"""After the search: the confirm stage and the speculative-decoding reference.

Confirm: the top k configurations of the search and the baseline each run R more times as
fresh launches (fresh servers, whole-node trials through the same Ray trainable), in
interleaved order (top 1, top 2, ..., baseline, top 1, ...) so that drift hits all alike,
with no early stopping. Each launch's score is the mean of its rounds; the R scores give a
mean and a 95% confidence interval (Student's t). A configuration is declared the winner
only if its whole interval is better than the baseline's whole interval; otherwise the
decision is the default settings, said plainly.

Speculative reference: when the workload's base arguments turn speculative decoding on, one
more launch of the decided communication settings runs with it off, and the verdict says
whether speculative decoding pays off on this machine at all.

Everything lands in DIR/confirm.json and in the journal (phase "confirm").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from search_spaces.knobs import SPECULATIVE_KNOBS, Value
from tuner import results
from tuner.searchers import FixedPoints
from tuner.stats import CONFIDENCE, Interval, clears, finite, interval

if TYPE_CHECKING:
    from tuner.experiment import Print, Setup

CONFIRM_JSON = "confirm.json"
CONFIRM_DIR = "confirm"  # Ray's own files of the confirm trials (ours stay in DIR/<trial id>)
REFERENCE_DIR = "reference"
NO_SPECULATIVE = "no_speculative"  # the journal's variant of the reference launch


# ---------------------------------------------------------------- what to confirm


@dataclass
class Candidate:
    label: str  # "baseline", "top 1", ...
    config: dict[str, Value]
    source_trial: str | None  # the search trial it comes from
    search_score: float | None


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, default=str)


def search_rows(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "phase" not in df:
        return df
    return df[df["phase"].fillna("search") == "search"]


def candidates(df: pd.DataFrame, configs: Mapping[str, Mapping[str, Value]],
               baseline: Mapping[str, Value], mode: str, top: int) -> list[Candidate]:
    """The baseline, then the best ``top`` distinct non-baseline configs that completed every
    round of the search."""
    search = search_rows(df)
    base_rows = search[search["baseline"]] if not search.empty else search
    base_id = str(base_rows["trial_id"].iloc[0]) if len(base_rows) else None
    out = [Candidate("baseline", dict(baseline), base_id,
                     finite(base_rows["score"].iloc[0]) if len(base_rows) else None)]
    if search.empty:
        return out
    done = search[(search["status"] == "ok") & search["score"].notna() & ~search["baseline"]]
    seen = {_key(baseline)}
    for _, row in done.sort_values("score", ascending=mode == "min").iterrows():
        config = dict(configs.get(str(row["trial_id"]), {}))
        if not config or _key(config) in seen:
            continue
        seen.add(_key(config))
        out.append(Candidate(f"top {len(out)}", config, str(row["trial_id"]), finite(row["score"])))
        if len(out) > top:
            break
    return out


# ---------------------------------------------------------------- a searcher of fixed points


def _trial_dirname(trial: Any) -> str:
    return str(trial.trial_id)


# ---------------------------------------------------------------- running fixed points


@dataclass
class Batch:
    """Trials of one fixed-point run: which point each trial ran, and whether it finished."""

    assigned: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False


def run_points(setup: Setup, trainable: type, points: Sequence[Mapping[str, Value]],
               labels: Sequence[str], *, name: str, tags: Mapping[str, Any]) -> Batch:
    """Run the points as Ray trials of ``trainable`` (whole-node, FIFO, no early stopping),
    journaled with ``tags``; the terminal shows one line per trial event."""
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler

    from tuner.dashboard import reuse_actors
    from tuner.progress import TrialLines
    from tuner.recorder import Recorder

    spec, objective = setup.spec, setup.objective
    out = spec.out_dir.resolve()
    searcher = FixedPoints(points, labels)

    def table() -> None:
        df = results.build_table(out, objective, setup.space.baseline(), running=True)
        if not df.empty:
            results.write_csv(df, out)

    recorder = Recorder(out, table, tags=tags)
    reporter = TrialLines(objective.metric, list(setup.space.domains), spec.rounds,
                          stage_of=searcher.label_of, phase=str(tags.get("phase", name)))
    tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(
        metric=objective.metric, mode=objective.mode, num_samples=len(points),
        search_alg=searcher, scheduler=FIFOScheduler(),
        reuse_actors=reuse_actors(spec.reuse_actors, spec.dashboard),
        trial_dirname_creator=_trial_dirname), run_config=tune.RunConfig(
        name=name, storage_path=str(out), callbacks=[recorder], progress_reporter=reporter,
        verbose=1, failure_config=tune.FailureConfig(max_failures=0)))
    from tuner.experiment import interrupt_watch

    with interrupt_watch() as was_interrupted:
        grid = tuner.fit()
        caught = was_interrupted()
    trials = grid._experiment_analysis.trials
    interrupted = caught or len(trials) < len(points) or any(
        t.status not in ("TERMINATED", "ERROR") for t in trials)
    return Batch(dict(searcher.assigned), interrupted)


def interleaved(cands: Sequence[Candidate], repeats: int
                ) -> tuple[list[dict[str, Value]], list[str], list[int]]:
    """Points, labels and candidate index per point: repeat 1 of every candidate, then 2..."""
    points, labels, owner = [], [], []
    for r in range(repeats):
        for i, c in enumerate([*cands[1:], cands[0]]):  # the baseline last in each round
            points.append(dict(c.config))
            labels.append(f"{c.label} {r + 1}/{repeats}")
            owner.append((i + 1) % len(cands))
    return points, labels, owner


# ---------------------------------------------------------------- statistics and the verdict


def _rows(df: pd.DataFrame, ids: Sequence[str]) -> pd.DataFrame:
    return df[df["trial_id"].isin(list(ids))] if not df.empty else df


def _column(rows: pd.DataFrame, name: str) -> list[float | None]:
    if name not in rows:
        return []
    return [finite(v) for v in rows[name]]


def summarize(cand: Candidate, ids: Sequence[str], df: pd.DataFrame) -> dict[str, Any]:
    rows = _rows(df, ids)
    ok = rows[(rows["status"] == "ok") & rows["score"].notna()] if len(rows) else rows
    failed = rows[rows["status"] == "failed"] if len(rows) else rows
    return {
        "label": cand.label, "source_trial": cand.source_trial, "search_score": cand.search_score,
        "config": cand.config, "trials": list(ids), "scores": _column(ok, "score"),
        "failed": [{"trial_id": str(r["trial_id"]), "kind": r.get("failure_kind")}
                   for _, r in failed.iterrows()],
        "objective": interval(_column(ok, "score")).to_json(),
        "verify_ms": interval(_column(ok, "verify_ms")).to_json(),
    }


def _iv(entry: Mapping[str, Any], key: str = "objective") -> Interval:
    return Interval(**entry[key])


def _fmt(iv: Interval) -> str:
    return iv.text()


def decide_confirmed(entries: Sequence[Mapping[str, Any]], metric: str, mode: str,
                     repeats: int) -> dict[str, Any]:
    """The winner, only when its interval clears the baseline's."""
    base = entries[0]
    base_iv = _iv(base)
    if base_iv.low is None:
        return {"kind": "unconfirmed", "label": None, "text":
                f"the baseline completed {base_iv.n} of {repeats} confirm launches, too few "
                "for a confidence interval: nothing can be declared better than it"}
    winners = [e for e in entries[1:] if not e["failed"] and clears(_iv(e), base_iv, mode)]
    if not winners:
        return {"kind": "default", "label": "baseline", "text":
                f"No configuration beat the default beyond noise: the baseline's {metric} is "
                f"{_fmt(base_iv)} and no candidate's 95% interval clears it over {repeats} "
                "fresh launches each. Keep the default settings."}
    pick = max if mode == "max" else min
    best = pick(winners, key=lambda e: _iv(e).mean or 0.0)
    best_iv = _iv(best)
    ratio = results.Objective(metric, mode, 1).speedup(best_iv.mean or 0.0, base_iv.mean or 0.0)
    return {"kind": "confirmed", "label": best["label"], "text":
            f"{best['label']} ({best['source_trial']}) beats the default beyond noise: {metric} "
            f"{_fmt(best_iv)} against {_fmt(base_iv)} for the baseline ({ratio:.3f}x), "
            f"95% intervals over {repeats} fresh launches each"}


def speculative_verdict(with_iv: Interval | None, with_score: float | None,
                        ref: Mapping[str, Any] | None, metric: str, mode: str
                        ) -> dict[str, Any]:
    """Does speculative decoding pay off? ``with_*``: the decided settings with it on (an
    interval over confirm launches, or one search score); ``ref``: the row of the run
    without it."""
    data: dict[str, Any] = {"reference_trial": ref.get("trial_id") if ref else None,
                            "without": None, "with": with_score, "pays_off": None}
    if with_iv is not None and with_iv.mean is not None:
        data["with"] = with_iv.mean
        data["with_interval"] = with_iv.to_json()
    if ref is None or ref.get("status") != "ok" or finite(ref.get("score")) is None:
        kind = (ref or {}).get("failure_kind") or (ref or {}).get("status") or "not run"
        data["text"] = (f"the reference run without speculative decoding did not complete "
                        f"({kind}): no verdict on speculative decoding")
        return data
    without = finite(ref.get("score"))
    assert without is not None
    data["without"] = without
    if data["with"] is None:
        data["text"] = (f"without speculative decoding: {metric} {without:.4g}; the run with it "
                        "has no score to compare")
        return data
    with_value = float(data["with"])
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)
    both = f"{metric} {with_value:.4g} with it against {without:.4g} without"
    if with_iv is not None and with_iv.low is not None and with_iv.high is not None:
        low, high = (with_iv.low, with_iv.high)
        if better(low if mode == "max" else high, without):
            data["pays_off"] = True
            data["text"] = f"Speculative decoding pays off here: {both} (outside the 95% interval)"
        elif better(without, high if mode == "max" else low):
            data["pays_off"] = False
            data["text"] = (f"Speculative decoding does NOT pay off here: {both}; serve "
                            "without it")
        else:
            data["text"] = (f"Speculative decoding makes no clear difference here: {both} "
                            "(inside the 95% interval)")
        return data
    data["pays_off"] = better(with_value, without)
    verdict = "pays off" if data["pays_off"] else "does NOT pay off"
    data["text"] = f"Speculative decoding {verdict} here: {both} (single runs, not noise-checked)"
    return data


# ---------------------------------------------------------------- the stage


def reference_args(workload_args: Any) -> Any | None:
    """The workload's args with speculative decoding off; None when it is off (or the
    workload has no such switch)."""
    without: Callable[[], Any] | None = getattr(workload_args, "without_speculative", None)
    return without() if without is not None else None


def without_speculative_knobs(config: Mapping[str, Value]) -> dict[str, Value]:
    return {k: (None if k in SPECULATIVE_KNOBS else v) for k, v in config.items()}


def run_stage(setup: Setup, make_trainable: Callable[[Any], type], *, echo: Print
              ) -> dict[str, Any]:
    """Confirm (unless ``spec.confirm`` is 0) and the speculative reference; writes and
    returns confirm.json's content. ``make_trainable(spec)`` builds the Ray trainable."""
    spec, objective = setup.spec, setup.objective
    out = spec.out_dir.resolve()
    done = load(out)
    if done is not None and not done.get("interrupted"):  # a resumed, already finished run
        return done
    baseline = setup.space.baseline()
    df = results.build_table(out, objective, baseline)
    configs = {tid: t["config"] for tid, t in results.collect(out).items()}
    cands = candidates(df, configs, baseline, objective.mode, spec.confirm_top)
    data: dict[str, Any] = {"metric": objective.metric, "mode": objective.mode,
                            "repeats": spec.confirm, "top": spec.confirm_top,
                            "confidence": CONFIDENCE, "rounds_per_launch": spec.rounds,
                            "entries": [], "interrupted": False}
    trainable = None
    if spec.confirm > 0 and len(cands) > 1:
        echo("")
        echo(f"confirm: {len(cands) - 1} best config(s) and the baseline, {spec.confirm} fresh "
             f"launches each, interleaved, no early stopping")
        trainable = make_trainable(spec)
        points, labels, owner = interleaved(cands, spec.confirm)
        batch = run_points(setup, trainable, points, labels, name=CONFIRM_DIR,
                           tags={"phase": "confirm"})
        data["interrupted"] = batch.interrupted
        df = results.build_table(out, objective, baseline)
        for i, cand in enumerate(cands):
            ids = [tid for tid, p in batch.assigned.items() if owner[p] == i]
            data["entries"].append(summarize(cand, ids, df))
        data["decision"] = decide_confirmed(data["entries"], objective.metric, objective.mode,
                                            spec.confirm)
    elif spec.confirm > 0:
        data["note"] = "no configuration besides the baseline completed the search: nothing to confirm"
    data["decision"] = _with_config(
        data.get("decision") or _unconfirmed(df, cands, spec.confirm, objective.mode), cands)
    if data["interrupted"]:
        write(out, data)
        return data
    data["speculative"] = _speculative(setup, make_trainable, data, echo)
    write(out, data)
    return data


def _unconfirmed(df: pd.DataFrame, cands: Sequence[Candidate], repeats: int, mode: str
                 ) -> dict[str, Any]:
    best = next((c for c in cands[1:]), None)
    search = search_rows(df)
    base_ok = len(search) and bool(((search["baseline"]) & (search["status"] == "ok")).any())
    why = "--confirm 0" if repeats == 0 else "nothing to confirm"
    if best is None:
        if base_ok:
            return {"kind": "default", "label": "baseline",
                    "text": f"only the baseline completed the search ({why})"}
        return {"kind": "none", "label": None, "text": "no trial completed every round"}
    base = cands[0].search_score
    if base is not None and best.search_score is not None and base_ok and not (
            best.search_score > base if mode == "max" else best.search_score < base):
        return {"kind": "default", "label": "baseline",
                "text": f"no configuration beat the baseline in the search ({best.label} "
                        f"{best.search_score:.4g} against {base:.4g}; {why}): keep the default "
                        "settings"}
    score = "" if best.search_score is None else f" at {best.search_score:.4g}" + (
        f" against {base:.4g} for the baseline" if base else "")
    return {"kind": "unconfirmed", "label": best.label, "text":
            f"{best.label} ({best.source_trial}) is the search's best{score}, not checked "
            f"against noise ({why})"}


def _with_config(decision: dict[str, Any], cands: Sequence[Candidate]) -> dict[str, Any]:
    chosen = next((c for c in cands if c.label == decision.get("label")), None)
    if decision["kind"] == "unconfirmed" and chosen is None and len(cands) > 1:
        chosen = cands[1]
    decision["config"] = chosen.config if chosen else None
    decision["source_trial"] = chosen.source_trial if chosen else None
    decision["label"] = chosen.label if chosen else None
    return decision


def _speculative(setup: Setup, make_trainable: Callable[[Any], type], data: dict[str, Any],
                 echo: Print) -> dict[str, Any] | None:
    spec, objective = setup.spec, setup.objective
    args = reference_args(spec.workload)
    decision = data["decision"]
    if args is None or decision.get("config") is None:
        return None
    echo("")
    echo(f"speculative decoding: one launch of the {decision['label']} settings with it off")
    ref_spec = spec.model_copy(update={"workload": args})
    config = without_speculative_knobs(decision["config"])
    batch = run_points(setup, make_trainable(ref_spec), [config], ["no speculative"],
                       name=REFERENCE_DIR, tags={"phase": "confirm", "variant": NO_SPECULATIVE})
    if batch.interrupted:
        data["interrupted"] = True
    df = results.build_table(spec.out_dir.resolve(), objective, setup.space.baseline())
    rows = _rows(df, list(batch.assigned))
    ref = rows.iloc[0].to_dict() if len(rows) else None
    entry = next((e for e in data["entries"] if e["label"] == decision["label"]), None)
    with_iv = _iv(entry) if entry else None
    with_score = finite(entry["search_score"]) if entry else _search_score(df, decision)
    verdict = speculative_verdict(with_iv, with_score, ref, objective.metric, objective.mode)
    verdict["algorithm"] = getattr(spec.workload, "speculative_algorithm", None)
    verdict["config"] = config
    return verdict


def _search_score(df: pd.DataFrame, decision: Mapping[str, Any]) -> float | None:
    tid = decision.get("source_trial")
    rows = df[df["trial_id"] == tid] if tid and not df.empty else df.iloc[0:0]
    return finite(rows["score"].iloc[0]) if len(rows) else None


def write(out: Path, data: Mapping[str, Any]) -> None:
    results.write_json(out / CONFIRM_JSON, data)


def load(out: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((out / CONFIRM_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data


def lines(data: Mapping[str, Any]) -> list[str]:
    """The confirm table and the verdicts, for the terminal and report.md."""
    out: list[str] = []
    entries = data.get("entries") or []
    metric = data.get("metric", "score")
    if entries:
        out.append(f"confirm ({data['repeats']} fresh launches each, mean ± 95% CI half-width):")
        out.append(f"  {'config':<12} {'from':<10} {metric:>24} {'verify_ms':>22}  failed")
        for e in entries:
            out.append(f"  {e['label']:<12} {e['source_trial'] or '-':<10} "
                       f"{_iv(e).text():>24} {_iv(e, 'verify_ms').text():>22}  "
                       f"{len(e['failed'])}")
    decision = data.get("decision") or {}
    if decision.get("text"):
        out.append("decision: " + decision["text"])
    spec = data.get("speculative")
    if spec and spec.get("text"):
        out.append(spec["text"])
    if data.get("interrupted"):
        out.append("the confirm stage was interrupted: its numbers are partial")
    return out
