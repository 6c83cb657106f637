"""Exports of the decided configuration, in DIR/best/:

- ``launch.sh``: the env exports and the server argv, runnable as is (across nodes: every
  node's command, ``launch.sh NODE_RANK DIST_INIT_ADDR`` on each): the user's command and the
  decided configuration as its trial's server resolved it (a comment names each value SGLang
  resolved other than asked), nothing a trial adds only to measure (the workload's
  ``production_plan``);
- ``env``: the same env as a dotenv file;
- ``nccl-tuner.csv``: what NCCL ran, as rules for NCCL's example tuner plugin
  (``tuner.output.tuner_csv``);
- ``report.md``: what was searched, how, the decision with its evidence, failures by kind.

and DIR/best.json (machine-readable).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from launchers import multinode
from launchers.base import LaunchPlan
from tuner.output.files import BEST_DIR, BEST_JSON, read_json, write_json
from tuner.output.ran import launched, trial_ran
from tuner.output.tuner_csv import tuner_csv, tuner_rules
from tuner.setup import Setup

LAUNCH = "launch.sh"
ENV = "env"
TUNER_CSV = "nccl-tuner.csv"
REPORT_MD = "report.md"

# ---------------------------------------------------------------- launch.sh and env


def dotenv_value(value: str) -> str:
    """Bare when safe, else double-quoted: readable by dotenv loaders, systemd and a shell's
    ``set -a; . env`` alike (``;`` in NCCL_ALGO=allreduce:tree;allgather:ring needs quotes)."""
    if value and all(c.isalnum() or c in "._-:/,^" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def write_launch(folder: Path, plan: LaunchPlan, notes: Sequence[str] = ()) -> Path:
    """launch.sh; ``notes`` as comments under its first line."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / LAUNCH
    # Across nodes: one script for every node (launch.sh NODE_RANK DIST_INIT_ADDR).
    first, _, rest = (multinode.shell_script(plan) if plan.peers else plan.shell_script()
                      ).partition("\n")
    script.write_text("\n".join([first, *(f"# {n}" for n in notes), rest]))
    os.chmod(script, 0o755)
    return script


def write_env(folder: Path, plan: LaunchPlan) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ENV
    path.write_text("".join(f"{k}={dotenv_value(v)}\n" for k, v in sorted(plan.env.items())))
    return path


# ---------------------------------------------------------------- best.json and best/


def _trial_effective(out: Path, trial_id: str | None) -> dict[str, Any] | None:
    data = read_json(out / trial_id / "effective.json") if trial_id else None
    return data if isinstance(data, dict) else None


def _ranks(df: pd.DataFrame, trial_id: str | None, setup: Setup) -> int | None:
    rows = df[df["trial_id"] == trial_id] if trial_id and "nccl_nranks" in df else df.iloc[0:0]
    if len(rows):
        value = rows["nccl_nranks"].iloc[0]
        if value == value and value is not None:
            return int(value)
    return setup.spec.workload.tp_ranks() or setup.gpus_per_trial or None


def export(setup: Setup, decision: Mapping[str, Any], df: pd.DataFrame,
           confirm_data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Write best.json and DIR/best/* for the decided configuration (``decision`` as
    confirm.json holds it); None when there is none."""
    config = decision.get("config")
    if config is None:
        return None
    out = setup.spec.out_dir
    tid = decision.get("source_trial")
    served, changed = launched(config, trial_ran(out, tid, config), setup.space)
    plan = setup.production_plan(served, out / BEST_DIR)
    rows = df[df["trial_id"] == tid] if tid is not None and not df.empty else df.iloc[0:0]
    row = rows.iloc[0] if len(rows) else None
    search = df[(df["baseline"]) & (df.get("phase", "search") == "search")] if not df.empty \
        else df
    entry = next((e for e in (confirm_data or {}).get("entries", [])
                  if e["label"] == decision.get("label")), None)
    rules, notes = tuner_rules(config, _trial_effective(out, tid), _ranks(df, tid, setup))
    best = {
        "trial_id": tid, "metric": setup.objective.metric, "mode": setup.objective.mode,
        "score": _float(row["score"]) if row is not None else None,
        "speedup": _float(row["speedup"]) if row is not None else None,
        "baseline_score": _float(search["score"].iloc[0]) if len(search) else None,
        "decision": decision.get("kind"), "label": decision.get("label"),
        "evidence": decision.get("text"),
        "confirmed": entry["objective"] if entry else None,
        "config": dict(config), "served_config": served, "argv": list(plan.argv),
        "env": dict(plan.env),
        "unset_env": list(plan.unset_env), "workload": setup.workload.kind,
        **({"peers": [list(p.argv) for p in plan.peers]} if plan.peers else {}),
        "nccl_tuner_rules": [r.csv_line() for r in rules],
        "limits": [lim.text() for lim in setup.objective.limits],
    }
    levels = (confirm_data or {}).get("per_level") or []
    if levels:
        best.update(decide_at=setup.objective.decide_at,
                    same_config=(confirm_data or {}).get("same_config"),
                    per_level=[_level(setup, item, df) for item in levels])
    write_json(out / BEST_JSON, best)
    folder = out / BEST_DIR
    write_launch(folder, plan, changed)
    write_env(folder, plan)
    (folder / TUNER_CSV).write_text(tuner_csv(rules, notes, setup.spec.name,
                                              f"NCCL's TUNING log lines of trial {tid}"))
    return best


def _level(setup: Setup, item: Mapping[str, Any], df: pd.DataFrame) -> dict[str, Any]:
    """One concurrency level's decision as best.json holds it, ready to launch."""
    decision = item.get("decision") or {}
    config, tid = decision.get("config"), decision.get("source_trial")
    rows = df[df["trial_id"] == tid] if tid is not None and not df.empty else df.iloc[0:0]
    column = str(item.get("metric"))
    entry: dict[str, Any] = {
        "level": item.get("level"), "metric": column, "decision": decision.get("kind"),
        "label": decision.get("label"), "evidence": decision.get("text"), "trial_id": tid,
        "score": _float(rows[column].iloc[0]) if len(rows) and column in rows else None,
        "config": config}
    if config is not None:
        out = setup.spec.out_dir
        served, _ = launched(config, trial_ran(out, tid, config), setup.space)
        plan = setup.production_plan(served, out / BEST_DIR)
        entry["served_config"] = served
        entry.update(argv=list(plan.argv), env=dict(plan.env), unset_env=list(plan.unset_env))
    return entry


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None
