"""End of a run: results.csv, the decision (confirmed, the default, or the search's best
unconfirmed), best.json and the exports in best/, report.md and report.html, the summary.
Everything here is read back from the experiment folder, so a resumed run ends the same way
as one that never stopped."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from launchers.failures import follower_placement
from tuner.decide.confirm import search_decision, served
from tuner.decide.decision import Decision
from tuner.output import broken, confirm_text, exports, proposals, report
from tuner.output import ruled_out as failure_memory
from tuner.output.files import BEST_DIR, JOURNAL, RESULTS_CSV, read_journal
from tuner.output.readiness import campaign
from tuner.output.results import collect, configs, search_rows, summary_lines, write_table
from tuner.run.profile import after_run
from tuner.search.memory import FailureMemory
from tuner.setup import Print, Setup

log = logging.getLogger(__name__)


class ReportError(RuntimeError):
    pass


@dataclass
class RunOutcome:
    out_dir: Path
    table: pd.DataFrame
    best: dict[str, Any] | None
    interrupted: bool
    lines: list[str]
    broken_environment: bool = False  # the search stopped: the environment, not a setting


def table(setup: Setup, running: bool = False) -> pd.DataFrame:
    return write_table(setup.out_dir, setup.objective, setup.space.baseline(), running)


def memory(setup: Setup) -> FailureMemory | None:
    """The failure memory the run built, rebuilt from the journal's ends in their order over
    the space's domains as the live one had them (its levers, the ends it reads): what it
    kept as a suspect stays one. A failure the space's rules or the workload's checks refuse
    taught it nothing (FilteringSearcher.record_outcome), nor does it here."""
    if not setup.spec.failure_aware:
        return None
    trials = collect(setup.out_dir)
    outcomes = []
    for event in read_journal(setup.out_dir / JOURNAL):
        tid = event.get("trial_id")
        if event.get("event") != "end" or tid not in trials or trials[tid]["phase"] != "search":
            continue
        failure = event.get("failure") or {}
        kind = failure.get("kind") if event.get("status") == "failed" else None
        config = trials[tid]["config"]
        if kind is not None and (setup.space.validate(config) or (
                kind == "invalid_config" and setup.refusal(config))):
            continue
        outcomes.append((str(tid), config, kind,
                         follower_placement(failure) if kind is not None else None))
    return FailureMemory.replay(setup.space.baseline(), outcomes, setup.space.domains)


def decision_data(setup: Setup, df: pd.DataFrame, why: str) -> dict[str, Any]:
    """confirm.json's shape when no confirm stage ran: the search's best, unconfirmed."""
    decision = search_decision(df, configs(setup.out_dir), setup.objective, why)
    return {"metric": setup.objective.metric, "mode": setup.objective.mode, "entries": [],
            "decision": decision.to_json()}


def write_reports(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None
                  ) -> list[Path]:
    """best/report.md and report.html with its plots. A plotting error is reported, not raised:
    the results and exports are already on disk."""
    written = []
    folder = setup.out_dir / BEST_DIR
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


def finish(setup: Setup, *, interrupted: bool, echo: Print,
           confirm_data: Mapping[str, Any] | None = None,
           broken_environment: dict[str, Any] | None = None) -> RunOutcome:
    out: Path = setup.out_dir
    df = table(setup)
    lines = summary_lines(search_rows(df), setup.objective, list(setup.space.domains))
    lines += proposals.lines(out)  # answered by a resolved twin, refused by SGLang
    if broken_environment is not None:  # nothing to decide, nothing ruled out
        lines += broken.lines(broken_environment, out)
        echo("")
        for line in lines:
            echo(line)
        echo(f"results: {out / RESULTS_CSV}")
        return RunOutcome(out, df, None, False, lines, broken_environment=True)
    built = memory(setup)
    if built is not None:  # ruled_out.json, suspects.json: what failed, where, and why
        evidence, suspects = built.evidence(), built.suspected()
        failure_memory.write(out, evidence, suspects)
        if evidence:
            lines.append("ruled out on evidence: " + "; ".join(e["evidence"] for e in evidence))
        if suspects:
            lines.append("suspect, not ruled out: " + "; ".join(s["evidence"] for s in suspects))
    if confirm_data is None:
        why = "the run was interrupted before the confirm stage" if interrupted \
            else "no confirm stage ran"
        confirm_data = decision_data(setup, df, why)
    serving, decided = served(setup, confirm_data)  # speculative off where it lost
    if decided != confirm_data.get("decision"):  # the report and confirm.json follow it
        confirm_data = {**confirm_data, "decision": decided.dump()}
        confirm_text.write(out, confirm_data)
    decision = Decision.from_json(decided.dump()) or Decision("none", "")
    best = exports.export(serving, decision.to_json(), df, confirm_data) if decision.config \
        else None
    if confirm_data.get("entries") or confirm_data.get("speculative"):
        lines += ["", *confirm_text.lines(confirm_data)]
    elif decision.text:
        lines.append(f"decision: {decision.text}")
    echo("")
    for line in lines:
        echo(line)
    if best is not None:
        echo(f"chosen: {decision.label} ({best['trial_id']}, {decision.kind}); "
             f"launch it with {out / BEST_DIR / exports.LAUNCH}")
        echo(f"exports: {out / BEST_DIR}/ ({exports.LAUNCH}, {exports.ENV}, "
             f"{exports.TUNER_CSV}, {exports.REPORT_MD})")
    else:
        echo("no trial completed every round: no best configuration")
    try:
        for path in write_reports(setup, df, confirm_data):
            if path.suffix == ".html":
                echo(f"report: {path}")
    except ReportError as err:
        echo(str(err))
    for line in campaign(out, df).lines():
        echo(line)
    if interrupted:
        echo(f"interrupted: finish it with  servetune run --resume {out}")
    echo(f"results: {out / RESULTS_CSV}")
    after_run(setup, interrupted=interrupted, echo=echo)  # run --profile
    return RunOutcome(out, df, best, interrupted, lines)
