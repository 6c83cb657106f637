"""End of a run: results.csv, best.json, best/launch.sh and best/env, the summary."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from launchers.base import LaunchPlan, TrialContext
from tuner import results

if TYPE_CHECKING:
    from tuner.experiment import Print, RunOutcome, Setup
    from tuner.search import SearchStack

# Debug-only settings servetune adds for measuring; a production launch leaves them out.
MEASUREMENT_ENV = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES",
                   "SGLANG_ENABLE_METRICS_DEVICE_TIMER", "SGLANG_RECORD_STEP_TIME")


def write_table(setup: Setup, running: bool = False) -> pd.DataFrame:
    df = results.build_table(setup.spec.out_dir, setup.objective, setup.space.baseline(), running)
    if not df.empty:
        results.write_csv(df, setup.spec.out_dir)
    return df


def production_plan(setup: Setup, config: dict[str, Any]) -> LaunchPlan:
    """The plan for ``config`` as a user would launch it: fixed port, no measuring env."""
    port = getattr(setup.spec.workload, "port", None) or 30000
    folder = setup.spec.out_dir / results.BEST_DIR
    gpus = tuple(str(i) for i in range(setup.gpus_per_trial))
    ctx = TrialContext(setup.spec.name, "best", folder, gpus, port, setup.spec.seed)
    plan = setup.workload.plan(config, ctx)
    env = {k: v for k, v in plan.env.items() if k not in MEASUREMENT_ENV}
    return replace(plan, env=env)


def export_best(setup: Setup, row: pd.Series, df: pd.DataFrame) -> dict[str, Any]:
    out = setup.spec.out_dir
    config = results.config_of(out, str(row["trial_id"]))
    plan = production_plan(setup, config)
    base = df[df["baseline"]]
    best = {
        "trial_id": row["trial_id"], "metric": setup.objective.metric,
        "mode": setup.objective.mode, "score": row["score"], "speedup": row["speedup"],
        "baseline_score": float(base["score"].iloc[0]) if len(base) else None,
        "config": config, "argv": list(plan.argv), "env": dict(plan.env),
        "unset_env": list(plan.unset_env), "workload": setup.workload.kind,
    }
    results.write_json(out / results.BEST_JSON, best)
    folder = out / results.BEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "launch.sh"
    script.write_text(plan.shell_script())
    os.chmod(script, 0o755)
    (folder / "env").write_text("".join(f"{k}={_dotenv(v)}\n" for k, v in sorted(plan.env.items())))
    return best


def _dotenv(value: str) -> str:
    if value and all(c.isalnum() or c in "._-:/,^;" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def finish(setup: Setup, stack: SearchStack | None, *, interrupted: bool, echo: Print
           ) -> RunOutcome:
    from tuner.experiment import RunOutcome

    df = write_table(setup, running=False)
    lines = results.summary_lines(df, setup.objective, list(setup.space.domains))
    best = None
    row = results.best_row(df, setup.objective)
    if row is not None:
        best = export_best(setup, row, df)
    out: Path = setup.spec.out_dir
    if stack is not None and stack.filtering.memory is not None:
        evidence = stack.filtering.memory.evidence()
        if evidence:
            results.write_json(out / "ruled_out.json", evidence)
            lines.append("ruled out after repeated failures: " + "; ".join(
                f"{e['knob']}={e['value']} ({e['kind']}: {', '.join(e['trials'])})"
                for e in evidence))
    if stack is not None and stack.staged is not None and stack.staged.history:
        results.write_json(out / "stages.json", stack.staged.history)
    echo("")
    for line in lines:
        echo(line)
    if best is not None:
        echo(f"best: {best['trial_id']} {setup.objective.metric}={best['score']:.4g} "
             f"({best['speedup']:.3f}x the baseline); launch it with {out / 'best' / 'launch.sh'}")
    else:
        echo("no trial completed every round: no best configuration")
    if interrupted:
        echo(f"interrupted: finish it with  servetune run --resume {out}")
    echo(f"results: {out / results.RESULTS_CSV}")
    return RunOutcome(out, df, best, interrupted, lines)
