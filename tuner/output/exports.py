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

from launchers import multinode
from launchers.base import LaunchPlan
from tuner.output.ran import launched, trial_ran
from tuner.output.tuner_csv import tuner_csv, tuner_rules
from tuner.record.confirm import ConfirmRecord, DecisionRecord, LevelDecision
from tuner.record.files import BEST_DIR, BEST_JSON, LAUNCH_SH
from tuner.record.info import BestRecord, LevelBest, write_record
from tuner.record.rows import ResultRow, Rows, by_id, rows_of
from tuner.record.trial_file import read_effective
from tuner.setup import Setup

LAUNCH = LAUNCH_SH
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


def _ranks(row: ResultRow | None, setup: Setup) -> int | None:
    value = row.value("nccl_nranks") if row is not None else None
    if value is not None:
        return int(value)
    return setup.spec.workload.tp_ranks() or setup.gpus_per_trial or None


def export(setup: Setup, decision: DecisionRecord | Mapping[str, Any], df: Rows,
           confirm_data: ConfirmRecord | Mapping[str, Any] | None) -> BestRecord | None:
    """Write best.json and DIR/best/* for the decided configuration (``decision`` as
    confirm.json holds it); None when there is none."""
    chosen = decision if isinstance(decision, DecisionRecord) else \
        DecisionRecord.model_validate(dict(decision))
    config = chosen.config
    if config is None:
        return None
    out = setup.spec.out_dir
    tid = chosen.source_trial
    served, changed = launched(config, trial_ran(out, tid, config), setup.space)
    plan = setup.production_plan(served, out / BEST_DIR)
    rows = rows_of(df)
    row = by_id(rows).get(tid) if tid is not None else None
    base = next((r for r in rows if r.baseline and r.search), None)
    confirm = ConfirmRecord.of(confirm_data)
    entry = confirm.entry(chosen.label) if confirm is not None else None
    rules, notes = tuner_rules(config, read_effective(out / tid) if tid else None,
                               _ranks(row, setup))
    levels = {"decide_at": setup.objective.decide_at, "same_config": confirm.same_config,
              "per_level": [_level(setup, item, rows) for item in confirm.per_level]} \
        if confirm is not None and confirm.per_level else {}
    best = BestRecord(
        trial_id=tid, metric=setup.objective.metric, mode=setup.objective.mode,
        score=row.score if row is not None else None,
        speedup=row.speedup if row is not None else None,
        baseline_score=base.score if base is not None else None,
        decision=chosen.kind, label=chosen.label, evidence=chosen.text,
        confirmed=entry.objective.dump() if entry else None,
        config=dict(config), served_config=served, argv=list(plan.argv), env=dict(plan.env),
        unset_env=list(plan.unset_env), workload=setup.workload.kind,
        **({"peers": [list(p.argv) for p in plan.peers]} if plan.peers else {}),
        nccl_tuner_rules=[r.csv_line() for r in rules],
        limits=[lim.text() for lim in setup.objective.limits], **levels)
    write_record(out / BEST_JSON, best)
    folder = out / BEST_DIR
    write_launch(folder, plan, changed)
    write_env(folder, plan)
    (folder / TUNER_CSV).write_text(tuner_csv(rules, notes, setup.spec.name,
                                              f"NCCL's TUNING log lines of trial {tid}"))
    return best


def _level(setup: Setup, item: LevelDecision, rows: Sequence[ResultRow]) -> LevelBest:
    """One concurrency level's decision as best.json holds it, ready to launch."""
    decision = item.decision
    config, tid = decision.config, decision.source_trial
    row = by_id(rows).get(tid) if tid is not None else None
    column = str(item.metric)
    launch: dict[str, Any] = {}
    if config is not None:
        out = setup.spec.out_dir
        served, _ = launched(config, trial_ran(out, tid, config), setup.space)
        plan = setup.production_plan(served, out / BEST_DIR)
        launch = {"served_config": served, "argv": list(plan.argv), "env": dict(plan.env),
                  "unset_env": list(plan.unset_env)}
    return LevelBest(level=item.level, metric=column, decision=decision.kind,
                     label=decision.label, evidence=decision.text, trial_id=tid,
                     score=row.value(column) if row is not None else None, config=config,
                     **launch)
