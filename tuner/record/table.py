"""The results table: the journal's trials (``trials.fold``) as typed rows, each with its
status, failure, score (the objective's mean over its rounds), what its server ran beside
what it asked, its metrics' means and its limit columns; the speedup against the baseline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces.knobs import CATALOGUE, WEIGHTS, weights_of, without_weights
from tuner.limits import SEARCH_KEY
from tuner.record.ran import Ran, asked_column, differs, shown
from tuner.record.rows import ResultRow, limit_columns
from tuner.record.trials import TrialRecord
from tuner.spec import Objective

_LAST_ONLY = ("nccl_", "ready_s", "startup_")  # columns per trial, not per round


def _mean(values: Sequence[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(nums) / len(nums) if nums else None


def same_settings(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> bool:
    """Whether ``config`` is the baseline (a knob it leaves out is at its unset value)."""
    config, baseline = without_weights(config), without_weights(baseline)
    return all(config.get(k) == v for k, v in baseline.items()) and \
        all(baseline.get(k, CATALOGUE[k].unset if k in CATALOGUE else None) == v
            for k, v in config.items())


def _show(value: Any) -> Any:
    return "default" if value is None else value


def status_of(trial: TrialRecord, objective: Objective, running: bool) -> str:
    end = trial.end
    if end is not None and end.status == "failed":
        return "failed"
    if end is not None and end.status == "ok":
        return "ok" if len(trial.rounds) >= objective.rounds else "stopped"
    return "running" if running else "interrupted"


def row(trial: TrialRecord, objective: Objective, baseline: Mapping[str, Any], ran: Ran,
        weighed: bool, running: bool = False) -> dict[str, Any]:
    """One trial's columns (no speedup: it needs the baseline's row)."""
    rounds = trial.rounds
    failure = trial.end.failure if trial.end is not None else None
    out: dict[str, Any] = {
        "trial_id": trial.trial_id, "order": trial.order, "phase": trial.phase,
        "variant": trial.variant, "stage": trial.stage,
        "baseline": same_settings(trial.config, baseline) and trial.variant is None,
        "status": status_of(trial, objective, running),
        "failure_kind": failure.kind if failure else None,
        "failure": failure.message if failure else None,
        "hint": (failure.hint or None) if failure else None, "rounds": len(rounds),
        "score": _mean([r.get(objective.metric) for r in rounds]),
    }
    resolved = ran(trial.trial_id, trial.config)  # what its server resolved, where known
    out.update({k: _show(v) for k, v in shown(trial.config, resolved).items()})
    out.update({asked_column(k): _show(v) for k, v in differs(trial.config, resolved).items()})
    if weighed:
        out[WEIGHTS] = weights_of(trial.config)
    names = {k for r in rounds for k in r} - {"round", SEARCH_KEY}
    for name in sorted(names):
        values = [r.get(name) for r in rounds]
        if name.startswith(_LAST_ONLY) or not any(isinstance(v, (int, float)) for v in values):
            out[name] = next((v for v in reversed(values) if v is not None), None)
        else:
            out[name] = _mean(values)
    if objective.limits and rounds:
        out.update(limit_columns(out, objective))
    return out


def build(trials: Mapping[str, TrialRecord], objective: Objective, baseline: Mapping[str, Any],
          ran: Ran, running: bool = False) -> tuple[ResultRow, ...]:
    """Every trial's row in launch order, with its speedup against the baseline's score."""
    # Which weights each trial loaded, once any trial's config says (the weight policy ran):
    # a config without the setting loaded the checkpoint's.
    weighed = any(WEIGHTS in t.config for t in trials.values())
    cells = [row(t, objective, baseline, ran, weighed, running) for t in trials.values()]
    base = next((c["score"] for c in cells if c["baseline"] and c["score"] is not None), None)
    return tuple(ResultRow.model_validate({
        **c, "speedup": objective.speedup(c["score"], base)
        if c["score"] is not None and base is not None else None}) for c in cells)
