"""Results: the journal -> one row per trial (pandas), the best row, the summary lines."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from search_spaces.knobs import CATALOGUE, WEIGHTS, Value, weights_of, without_weights
from tuner.limits import SEARCH_KEY, breaks
from tuner.output.files import JOURNAL, RESULTS_CSV, read_journal
from tuner.output.progress import settings_text
from tuner.output.ran import asked_column, differs, row_configs, shown, trial_ran
from tuner.spec import Objective

_LAST_ONLY = ("nccl_", "ready_s", "startup_")  # columns per trial, not per round


def _mean(values: list[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(nums) / len(nums) if nums else None


def collect(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Per trial (launch order): config, stage, rounds (latest attempt), end state."""
    trials: dict[str, dict[str, Any]] = {}
    for event in read_journal(out_dir / JOURNAL):
        tid = event.get("trial_id")
        if tid is None:
            continue
        kind = event["event"]
        if kind == "start":
            known = trials.get(tid)
            trials[tid] = {"order": known["order"] if known else event.get("order", len(trials)),
                           "config": event.get("config", {}), "stage": event.get("stage"),
                           "rounds": [], "end": None, "dir": event.get("dir"),
                           "phase": event.get("phase", "search"), "variant": event.get("variant"),
                           "attempts": (known["attempts"] + 1) if known else 1}
        elif tid in trials and kind == "result":
            trials[tid]["rounds"].append({k: v for k, v in event.items()
                                          if k not in ("event", "trial_id", "time")})
        elif tid in trials and kind == "end":
            trials[tid]["end"] = event
    return dict(sorted(trials.items(), key=lambda kv: kv[1]["order"]))


def build_table(out_dir: Path, objective: Objective, baseline: Mapping[str, Any],
                running: bool = False) -> pd.DataFrame:
    rows = []
    trials = collect(out_dir)
    # Which weights each trial loaded, once any trial's config says (the weight policy ran):
    # a config without the setting loaded the checkpoint's.
    weighed = any(WEIGHTS in t["config"] for t in trials.values())
    for tid, t in trials.items():
        rounds = t["rounds"]
        end = t["end"] or {}
        failure = end.get("failure") or {}
        if end.get("status") == "failed":
            status = "failed"
        elif end.get("status") == "ok":
            status = "ok" if len(rounds) >= objective.rounds else "stopped"
        else:
            status = "running" if running else "interrupted"
        row: dict[str, Any] = {
            "trial_id": tid, "order": t["order"], "phase": t["phase"], "variant": t["variant"],
            "stage": t["stage"],
            "baseline": _same(t["config"], baseline) and t["variant"] is None, "status": status,
            "failure_kind": failure.get("kind"), "failure": failure.get("message"),
            "hint": failure.get("hint") or None, "rounds": len(rounds),
            "score": _mean([r.get(objective.metric) for r in rounds]),
        }
        ran = trial_ran(out_dir, tid, t["config"])  # what its server resolved, where known
        row.update({k: _show(v) for k, v in shown(t["config"], ran).items()})
        row.update({asked_column(k): _show(v) for k, v in differs(t["config"], ran).items()})
        if weighed:
            row[WEIGHTS] = weights_of(t["config"])
        names = {k for r in rounds for k in r} - {"round", SEARCH_KEY}
        for name in sorted(names):
            values = [r.get(name) for r in rounds]
            if name.startswith(_LAST_ONLY) or not any(isinstance(v, (int, float)) for v in values):
                row[name] = next((v for v in reversed(values) if v is not None), None)
            else:
                row[name] = _mean(values)
        if objective.limits and rounds:
            row.update(limit_columns(row, objective))
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    base = df[df["baseline"] & df["score"].notna()]
    base_score = float(base["score"].iloc[0]) if len(base) else math.nan
    df["speedup"] = [objective.speedup(s, base_score) if s == s and s is not None else math.nan
                     for s in df["score"]]
    return df


WITHIN = "within_limits"  # True when the trial's means keep every limit
BREAKS = "limit_breaks"  # the limits broken, with the figures


def level_key(name: str, level: int | None, objective: Objective) -> str:
    return name if level is None or not objective.per_level else f"{name}_c{level}"


def limit_columns(row: Mapping[str, Any], objective: Objective) -> dict[str, Any]:
    """Whether a trial's means keep the limits, and which it breaks: at the level the
    search decides at, and with several levels at each (``within_limits_c<level>``)."""
    out: dict[str, Any] = {}
    for level in [None, *(objective.levels if objective.per_level else ())]:
        broken = breaks(row, objective.limits) if level is None else \
            breaks(row, objective.limits, level, objective.levels)
        out[level_key(WITHIN, level, objective)] = not broken
        out[level_key(BREAKS, level, objective)] = "; ".join(broken) or None
    return out


def feasible(df: pd.DataFrame, level: int | None = None,
             objective: Objective | None = None) -> pd.Series:
    """Rows that keep the limits (at ``level``); every row when there are none."""
    column = WITHIN if objective is None else level_key(WITHIN, level, objective)
    if df.empty or column not in df:
        return pd.Series(True, index=df.index)
    return df[column].map(lambda v: v is not False and v != "False")


def _same(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> bool:
    config, baseline = without_weights(config), without_weights(baseline)
    return all(config.get(k) == v for k, v in baseline.items()) and \
        all(baseline.get(k, CATALOGUE[k].unset if k in CATALOGUE else None) == v
            for k, v in config.items())


def _show(value: Any) -> Any:
    return "default" if value is None else value


def best_row(df: pd.DataFrame, objective: Objective) -> pd.Series | None:
    """The best trial that completed every round (stopped trials lost a comparison) and
    keeps the limits."""
    if df.empty:
        return None
    done = df[(df["status"] == "ok") & df["score"].notna() & feasible(df)]
    if done.empty:
        return None
    index = done["score"].idxmax() if objective.mode == "max" else done["score"].idxmin()
    return df.loc[index]


def write_csv(df: pd.DataFrame, out_dir: Path) -> Path:
    path = out_dir / RESULTS_CSV
    tmp = path.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def config_of(out_dir: Path, trial_id: str) -> dict[str, Any]:
    return without_weights(collect(out_dir)[trial_id]["config"])


def configs(out_dir: Path) -> dict[str, dict[str, Value]]:
    """Every trial's settings as launched, by trial id; which weights its server loaded is
    taken off (a setting to confirm or export never runs on random weights)."""
    return {tid: without_weights(t["config"]) for tid, t in collect(out_dir).items()}


def search_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The search's trials (not the confirm repeats or the reference launch)."""
    if df.empty or "phase" not in df:
        return df
    return df[df["phase"].fillna("search") == "search"]


def write_table(out_dir: Path, objective: Objective, baseline: Mapping[str, Any],
                running: bool = False) -> pd.DataFrame:
    """results.csv from the journal; at the end of a run (``running`` False) the trials'
    own records learn how the journal says they ended."""
    df = build_table(out_dir, objective, baseline, running)
    if not df.empty:
        write_csv(df, out_dir)
        if not running:
            reconcile_records(out_dir, df)
    return df


def reconcile_records(out: Path, df: pd.DataFrame) -> None:
    """A trial whose worker was killed before it could record its end (Ray ends a stopped
    trial's process without waiting) still says "running" in its trial.json: the journal
    knows how it ended, so its record says so too."""
    for tid, status in zip(df["trial_id"], df["status"], strict=True):
        path = out / str(tid) / "trial.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if record.get("status") == "running" and status in ("ok", "stopped", "failed"):
            record["status"] = status
            record.setdefault("warnings", []).append(
                "status taken from the journal: the trial's worker ended before it recorded "
                "its end")
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(record, indent=1, default=str))
            tmp.replace(path)


def summary_lines(df: pd.DataFrame, objective: Objective, knobs: list[str], top: int = 5
                  ) -> list[str]:
    """Top configs plus the baseline, and failures counted by kind."""
    if df.empty:
        return ["no trials ran"]
    lines = []
    scored = df[df["score"].notna() & feasible(df)]
    order = scored.sort_values("score", ascending=objective.mode == "min")
    shown = order[order["status"] == "ok"].head(top)
    base = df[df["baseline"]]
    lines.append(f"{'trial':<14} {'status':<8} {objective.metric:>12} {'speedup':>8}  settings")
    for _, row in pd.concat([shown, base[~base["trial_id"].isin(shown["trial_id"])]]).iterrows():
        asked, ran = row_configs(row, knobs)
        changed = settings_text(asked, knobs, ran)
        label = " (baseline)" if row["baseline"] else ""
        label += " [dummy weights]" if row.get(WEIGHTS) == "dummy" else ""
        score = f"{row['score']:.4g}" if row["score"] == row["score"] and row["score"] is not None \
            else "-"
        speed = f"{row['speedup']:.3f}x" if row["speedup"] == row["speedup"] else "-"
        lines.append(f"{row['trial_id']:<14} {row['status']:<8} {score:>12} {speed:>8}  "
                     f"{changed}{label}")
    counts = df["status"].value_counts().to_dict()
    lines.append("trials: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    outside = df[~feasible(df) & df["status"].isin(["ok", "stopped"])]
    if objective.limits:
        lines.append(f"limits: {', '.join(lim.text() for lim in objective.limits)}; "
                     f"{len(outside)} trial(s) outside them, never chosen")
        for _, row in outside.head(top).iterrows():
            lines.append(f"  {row['trial_id']}: {row[BREAKS]}")
    failed = df[df["failure_kind"].notna()]
    if len(failed):
        kinds = failed["failure_kind"].value_counts().to_dict()
        lines.append("failures by kind: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
        for _, row in failed.drop_duplicates("failure_kind").iterrows():
            hint = f" ({row['hint']})" if isinstance(row.get("hint"), str) else ""
            lines.append(f"  {row['failure_kind']}: {row['trial_id']}: {row['failure']}{hint}")
    return lines
