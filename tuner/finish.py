"""End of a run: results.csv, the decision (confirmed, the default, or the search's best
unconfirmed), best.json and the exports in best/, report.md and report.html, the summary."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tuner import confirm, exports, profile, results

if TYPE_CHECKING:
    from tuner.experiment import Print, RunOutcome, Setup
    from tuner.search import SearchStack

log = logging.getLogger(__name__)


def write_table(setup: Setup, running: bool = False) -> pd.DataFrame:
    df = results.build_table(setup.spec.out_dir, setup.objective, setup.space.baseline(), running)
    if not df.empty:
        results.write_csv(df, setup.spec.out_dir)
        if not running:
            reconcile_records(setup.spec.out_dir, df)
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


def search_decision(setup: Setup, df: pd.DataFrame, why: str) -> dict[str, Any]:
    """The search's best, unconfirmed (no confirm stage ran)."""
    row = results.best_row(confirm.search_rows(df), setup.objective)
    if row is None:
        return {"kind": "none", "label": None, "config": None, "source_trial": None,
                "text": "no trial completed every round: no configuration to recommend"}
    tid = str(row["trial_id"])
    config = results.config_of(setup.spec.out_dir, tid)
    return {"kind": "unconfirmed", "label": "top 1", "config": config, "source_trial": tid,
            "text": f"{tid} is the search's best ({setup.objective.metric} {row['score']:.4g}, "
                    f"{row['speedup']:.3f}x the baseline), not checked against noise ({why})"}


def write_reports(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None
                  ) -> list[Path]:
    """best/report.md and report.html with its plots. A plotting error is reported, not raised:
    the results and exports are already on disk."""
    from tuner import report

    written = []
    folder = setup.spec.out_dir / results.BEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / exports.REPORT_MD
    md.write_text(report.markdown(report.facts(setup, df, confirm_data)))
    written.append(md)
    try:
        written.append(report.render(setup, df, confirm_data))
    except Exception as err:  # a plot that cannot be drawn must not lose the run's summary
        log.exception("report.html")
        raise ReportError(f"report.html could not be written: {err!r}") from err
    return written


class ReportError(RuntimeError):
    pass


def finish(setup: Setup, stack: SearchStack | None, *, interrupted: bool, echo: Print,
           confirm_data: Mapping[str, Any] | None = None) -> RunOutcome:
    from tuner.experiment import RunOutcome

    out: Path = setup.spec.out_dir
    df = write_table(setup, running=False)
    search = confirm.search_rows(df)
    lines = results.summary_lines(search, setup.objective, list(setup.space.domains))
    if stack is not None and stack.filtering.memory is not None:
        evidence = stack.filtering.memory.evidence()
        if evidence:
            results.write_json(out / "ruled_out.json", evidence)
            lines.append("ruled out after repeated failures: " + "; ".join(
                f"{e['knob']}={e['value']} ({e['kind']}: {', '.join(e['trials'])})"
                for e in evidence))
    if stack is not None and stack.staged is not None and stack.staged.history:
        results.write_json(out / "stages.json", stack.staged.history)
    if confirm_data is None:
        why = "the run was interrupted before the confirm stage" if interrupted \
            else "no confirm stage ran"
        confirm_data = {"metric": setup.objective.metric, "mode": setup.objective.mode,
                        "entries": [], "decision": search_decision(setup, df, why)}
    decision = dict(confirm_data.get("decision") or {})
    best = exports.export(setup, decision, df, confirm_data) if decision.get("config") else None
    if confirm_data.get("entries") or confirm_data.get("speculative"):
        lines += ["", *confirm.lines(confirm_data)]
    elif decision.get("text"):
        lines.append(f"decision: {decision['text']}")
    echo("")
    for line in lines:
        echo(line)
    if best is not None:
        echo(f"chosen: {decision.get('label')} ({best['trial_id']}, {decision.get('kind')}); "
             f"launch it with {out / results.BEST_DIR / exports.LAUNCH}")
        echo(f"exports: {out / results.BEST_DIR}/ ({exports.LAUNCH}, {exports.ENV}, "
             f"{exports.TUNER_CSV}, {exports.REPORT_MD})")
    else:
        echo("no trial completed every round: no best configuration")
    try:
        for path in write_reports(setup, df, confirm_data):
            if path.suffix == ".html":
                echo(f"report: {path}")
    except ReportError as err:
        echo(str(err))
    if interrupted:
        echo(f"interrupted: finish it with  servetune run --resume {out}")
    echo(f"results: {out / results.RESULTS_CSV}")
    profile.after_run(setup, interrupted=interrupted, echo=echo)  # run --profile
    return RunOutcome(out, df, best, interrupted, lines)
