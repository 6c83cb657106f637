"""Results: the experiment's typed rows (``tuner.record``) as results.csv and the summary
lines; the frame helpers the plots and the report use."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from search_spaces.knobs import WEIGHTS, Value
from tuner.output.progress import settings_text
from tuner.output.ran import row_configs
from tuner.record import rows as typed
from tuner.record.experiment import Experiment
from tuner.record.files import RESULTS_CSV, write_whole
from tuner.record.rows import BREAKS, WITHIN, level_key, limit_columns
from tuner.record.trial_file import reconcile
from tuner.record.trials import TrialRecord
from tuner.spec import Objective

__all__ = ["BREAKS", "WITHIN", "best_row", "build_table", "collect", "config_of", "configs",
           "feasible", "level_key", "limit_columns", "reconcile_records", "search_rows",
           "summary_lines", "write_csv", "write_table"]


def collect(out_dir: Path) -> dict[str, TrialRecord]:
    """Per trial (launch order): config, stage, rounds (latest attempt), end state."""
    return dict(Experiment.journal(out_dir).trials)


def build_table(out_dir: Path, objective: Objective, baseline: Mapping[str, Any],
                running: bool = False) -> pd.DataFrame:
    """results.csv's table, from the folder's journal."""
    return Experiment.journal(out_dir).table(objective, baseline, running)


def feasible(df: pd.DataFrame, level: int | None = None,
             objective: Objective | None = None) -> pd.Series:
    """Rows that keep the limits (at ``level``); every row when there are none."""
    column = WITHIN if objective is None else level_key(WITHIN, level, objective)
    if df.empty or column not in df:
        return pd.Series(True, index=df.index)
    return df[column].map(lambda v: v is not False and v != "False")


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
    write_whole(path, lambda f: df.to_csv(f, index=False))
    return path


def config_of(out_dir: Path, trial_id: str) -> dict[str, Any]:
    return Experiment.journal(out_dir).trials[trial_id].settings


def configs(out_dir: Path) -> dict[str, dict[str, Value]]:
    """Every trial's settings as launched, by trial id; which weights its server loaded is
    taken off (a setting to confirm or export never runs on random weights)."""
    return Experiment.journal(out_dir).settings()


def search_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The search's trials (not the confirm repeats or the reference launch)."""
    if df.empty or "phase" not in df:
        return df
    return df[df["phase"].fillna("search") == "search"]


def write_table(out_dir: Path, objective: Objective, baseline: Mapping[str, Any],
                running: bool = False, exp: Experiment | None = None) -> pd.DataFrame:
    """results.csv from the journal; at the end of a run (``running`` False) the trials'
    own records learn how the journal says they ended."""
    exp = exp if exp is not None else Experiment.journal(out_dir)
    rows = exp.rows(objective, baseline, running)
    df = typed.frame(rows)
    if not df.empty:
        write_csv(df, out_dir)
        if not running:
            reconcile_records(out_dir, rows)
    return df


def reconcile_records(out: Path, table: typed.Rows) -> None:
    """A trial whose worker was killed before it could record its end (Ray ends a stopped
    trial's process without waiting) still says "running" in its trial.json: the journal
    knows how it ended, so its record says so too."""
    for row in typed.rows_of(table):
        reconcile(out / row.trial_id, row.status)


def summary_lines(df: typed.Rows, objective: Objective, knobs: list[str], top: int = 5
                  ) -> list[str]:
    """Top configs plus the baseline, and failures counted by kind."""
    rows = typed.rows_of(df)
    if not rows:
        return ["no trials ran"]
    lines = []
    scored = [r for r in rows if r.score is not None and r.within()]
    shown = [r for r in typed.ranked(scored, "score", objective.mode) if r.status == "ok"][:top]
    ids = {r.trial_id for r in shown}
    lines.append(f"{'trial':<14} {'status':<8} {objective.metric:>12} {'speedup':>8}  settings")
    for row in [*shown, *(r for r in rows if r.baseline and r.trial_id not in ids)]:
        asked, ran = row_configs(row.flat(), knobs)
        changed = settings_text(asked, knobs, ran)
        label = " (baseline)" if row.baseline else ""
        label += " [dummy weights]" if row.cell(WEIGHTS) == "dummy" else ""
        score = f"{row.score:.4g}" if row.score is not None else "-"
        speed = f"{row.speedup:.3f}x" if row.speedup is not None else "-"
        lines.append(f"{row.trial_id:<14} {row.status:<8} {score:>12} {speed:>8}  "
                     f"{changed}{label}")
    counts = Counter(r.status for r in rows)
    lines.append("trials: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    outside = [r for r in rows if not r.within() and r.status in ("ok", "stopped")]
    if objective.limits:
        lines.append(f"limits: {', '.join(lim.text() for lim in objective.limits)}; "
                     f"{len(outside)} trial(s) outside them, never chosen")
        for row in outside[:top]:
            lines.append(f"  {row.trial_id}: {row.cell(BREAKS)}")
    failed = [r for r in rows if r.failure_kind is not None]
    if failed:
        kinds = Counter(r.failure_kind for r in failed)
        lines.append("failures by kind: " + ", ".join(f"{k} {v}" for k, v in
                                                      kinds.most_common()))
        for kind in kinds:
            row = next(r for r in failed if r.failure_kind == kind)
            hint = f" ({row.hint})" if isinstance(row.hint, str) else ""
            lines.append(f"  {row.failure_kind}: {row.trial_id}: {row.failure}{hint}")
    return lines
