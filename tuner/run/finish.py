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
from tuner.output.readiness import campaign
from tuner.output.results import search_rows, summary_lines, write_table
from tuner.record.confirm import ConfirmRecord
from tuner.record.events import EndEvent
from tuner.record.experiment import Experiment
from tuner.record.files import BEST_DIR, RESULTS_CSV
from tuner.record.info import BestRecord, BrokenRecord
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
    best: BestRecord | None
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
    exp = Experiment.journal(setup.out_dir)
    outcomes = []
    for event in exp.events:
        trial = exp.trials.get(event.trial_id)
        if not isinstance(event, EndEvent) or trial is None or not trial.search:
            continue
        kind = event.kind
        config = trial.config
        if kind is not None and (setup.space.validate(config) or (
                kind == "invalid_config" and setup.refusal(config))):
            continue
        failure = event.failure.dump() if event.failure is not None else {}
        outcomes.append((event.trial_id, config, kind,
                         follower_placement(failure) if kind is not None else None))
    return FailureMemory.replay(setup.space.baseline(), outcomes, setup.space.domains)


def decision_data(setup: Setup, df: pd.DataFrame, why: str, exp: Experiment | None = None
                  ) -> ConfirmRecord:
    """confirm.json's record when no confirm stage ran: the search's best, unconfirmed."""
    exp = exp if exp is not None else Experiment.journal(setup.out_dir)
    decision = search_decision(df, exp.settings(), setup.objective, why)
    return ConfirmRecord.model_validate({
        "metric": setup.objective.metric, "mode": setup.objective.mode, "entries": [],
        "decision": decision.to_json()})


def write_reports(setup: Setup, df: pd.DataFrame,
                  confirm_data: ConfirmRecord | Mapping[str, Any] | None,
                  exp: Experiment | None = None) -> list[Path]:
    """best/report.md and report.html with its plots. A plotting error is reported, not raised:
    the results and exports are already on disk."""
    written = []
    folder = setup.out_dir / BEST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / exports.REPORT_MD
    exp = exp if exp is not None else Experiment.load(setup.out_dir)  # read once for both
    md.write_text(report.markdown(report.facts(setup, df, confirm_data, exp=exp)))
    written.append(md)
    try:
        written.append(report.render(setup, df, confirm_data, exp))
    except Exception as err:  # a plot that cannot be drawn must not lose the run's summary
        log.exception("report.html")
        raise ReportError(f"report.html could not be written: {err!r}") from err
    return written


def finish(setup: Setup, *, interrupted: bool, echo: Print,
           confirm_data: ConfirmRecord | Mapping[str, Any] | None = None,
           broken_environment: BrokenRecord | None = None) -> RunOutcome:
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
        return RunOutcome(out, df, None, interrupted, lines, broken_environment=True)
    built = memory(setup)
    if built is not None:  # ruled_out.json, suspects.json: what failed, where, and why
        evidence, suspects = built.evidence(), built.suspected()
        failure_memory.write(out, evidence, suspects)
        if evidence:
            lines.append("ruled out on evidence: " + "; ".join(e["evidence"] for e in evidence))
        if suspects:
            lines.append("suspect, not ruled out: " + "; ".join(s["evidence"] for s in suspects))
    record = ConfirmRecord.of(confirm_data)
    if record is None:
        why = "the run was interrupted before the confirm stage" if interrupted \
            else "no confirm stage ran"
        record = decision_data(setup, df, why)
    serving, decided = served(setup, record)  # speculative off where it lost
    if decided != record.decision:  # the report and confirm.json follow it
        record = confirm_text.write(out, record.with_decision(decided))
    decision = Decision.from_json(decided.dump()) or Decision("none", "")
    best = exports.export(serving, decision.to_json(), df, record) if decision.config \
        else None
    if record.entries or record.speculative:
        lines += ["", *confirm_text.lines(record)]
    elif decision.text:
        lines.append(f"decision: {decision.text}")
    echo("")
    for line in lines:
        echo(line)
    if best is not None:
        echo(f"chosen: {decision.label} ({best.trial_id}, {decision.kind}); "
             f"launch it with {out / BEST_DIR / exports.LAUNCH}")
        echo(f"exports: {out / BEST_DIR}/ ({exports.LAUNCH}, {exports.ENV}, "
             f"{exports.TUNER_CSV}, {exports.REPORT_MD})")
    else:
        echo("no trial completed every round: no best configuration")
    try:
        for path in write_reports(setup, df, record):
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
