"""The experiment report: DIR/report.html with its PNG plots in DIR/plots/, and the same facts
as Markdown for DIR/best/report.md. ``servetune report DIR`` renders both from what is on
disk (servetune.json, results.jsonl, confirm.json, run.json, ruled_out.json,
suspects.json)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from search_spaces.knobs import DUMMY, WEIGHTS
from search_spaces.searches import strategy
from tuner.output import pareto, partners, plots, proposals, readiness, results
from tuner.output import ruled_out as failure_memory
from tuner.output.confirm_text import Confirm
from tuner.output.confirm_text import lines as confirm_lines
from tuner.output.progress import settings_text
from tuner.output.ran import row_configs, trial_ran
from tuner.output.report_pages import SUSPECT, Facts, Plot, Table, html_page, markdown
from tuner.record.confirm import ConfirmRecord, DecisionRecord
from tuner.record.experiment import Experiment, loaded
from tuner.record.info import RunInfo
from tuner.record.rows import BREAKS, ResultRow, by_id, ranked, rows_of, search_rows
from tuner.setup import Setup
from tuner.weights import LIMIT

__all__ = ["SUSPECT", "Facts", "Plot", "Table", "facts", "html_page", "level_table", "markdown",
           "render", "render_plots"]

REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def facts(setup: Setup, df: pd.DataFrame, confirm_data: Confirm | None,
          top_n: int = 8, exp: Experiment | None = None) -> Facts:
    """What the report says; ``exp``: the folder's records when already read."""
    spec, objective = setup.spec, setup.objective
    out = spec.out_dir
    knobs = list(setup.space.domains)
    exp = exp if exp is not None else loaded(out)  # the folder's other records, read once
    run = exp.run or RunInfo()
    confirm = ConfirmRecord.of(confirm_data)
    described = setup.workload.describe()
    workload = [["setting", "value"]] + [
        [k, _cell(v if not isinstance(v, list) else " ".join(map(str, v)) or "-")]
        for k, v in described.items() if v not in (None, [], "")]
    space = [["knob", "values tried (first: the baseline)"]] + [
        [k, ", ".join("default" if v is None else str(v) for v in values)]
        for k, values in setup.space.domains.items()]
    space += [[k, f"pinned to {v}"] for k, v in setup.space.pins.items()]
    how = [["what", "how"],
           ["space", f"{setup.space.name}: {' '.join(setup.space.description.split())}"],
           ["search", spec.search + (f" (stages searched by {spec.stage_search})"
                                     if strategy(spec.search).staged else "")
            + (", failure-aware" if spec.failure_aware else "")],
           ["trials", f"{spec.samples or 'sized from the space'} (the baseline first), "
                      f"{spec.rounds} benchmark rounds each"],
           ["early stopping", spec.scheduler],
           ["objective", f"{objective.metric} ({objective.mode}imize), mean over a trial's rounds"],
           ["confirm", f"top {spec.confirm_top} and the baseline, fresh launches alternating "
                       f"until decided, at most {spec.confirm} each (ratio of launch means, "
                       "Welch, 95% over the looks)" if spec.confirm else "skipped (--confirm 0)"],
           ["resources", f"{_known(run.nodes)} node(s), GPUs per node "
                         f"{_known(run.gpus_per_node)}, {_known(run.gpus_per_trial)} "
                         "GPU(s) per trial (a whole node)"]]
    if objective.limits:
        how.append(["limits", ", ".join(lim.text() for lim in objective.limits)
                    + ": a trial outside them is infeasible, never chosen; in the confirm "
                    "stage a config must keep them over its whole 95% interval"])
    if objective.per_level:
        how.append(["concurrency", f"each round measures levels "
                    f"{', '.join(map(str, objective.levels))}; the search optimises "
                    f"{objective.decide_at} (--decide-at), each level gets its own winner"])
    decision = confirm.decided if confirm is not None else DecisionRecord()
    chosen_config = decision.config
    # What its trial's server ran, unless the decision serves it otherwise (speculative off).
    ran = {} if decision.speculative is False else \
        trial_ran(out, decision.source_trial, chosen_config or {})
    chosen = "-" if chosen_config is None else settings_text(chosen_config, knobs, ran)
    rows = rows_of(df)
    notes = setup.space_notes()
    if setup.weights.applies or setup.weights.note:
        how.append(["weights", setup.weights.summary()])
    how += [["not launched", line.partition(": ")[2]] for line in proposals.lines(exp)]
    how += [["partners completed", line.partition(": ")[2]] for line in partners.lines(exp)]
    notes += proposals.refusals(exp)
    if any(r.cell(WEIGHTS) == DUMMY for r in rows):
        notes.append(f"random weights: {LIMIT}")
    startup, campaign = readiness.section(df, exp)
    ruled, suspects = failure_memory.load(exp)
    speculative = confirm.speculative if confirm is not None else None
    return Facts(spec.name, str(out), workload, space, how,
                 decision.text or "no decision (the run did not complete)",
                 str(decision.kind or "none"), chosen,
                 [ln for ln in confirm_lines(confirm or {}) if ln.startswith("  ")
                  or ln.startswith("confirm")], speculative.text or None if speculative else None,
                 top_table(rows, setup, top_n), failure_table(rows), notes, counts(rows),
                 *level_table(setup, df, confirm_data), startup, campaign,
                 failure_memory.ruled_out_table(ruled), failure_memory.suspects_table(suspects))


def _known(value: object) -> str:
    return "?" if value is None else str(value)


def counts(rows: Sequence[ResultRow]) -> str:
    """Trials by status."""
    found = Counter(r.status for r in rows)
    return ", ".join(f"{v} {k}" for k, v in sorted(found.items())) if rows else "no trials"


def top_table(rows: Sequence[ResultRow], setup: Setup, top_n: int) -> Table:
    """The search's best completed trials, best first, and the baseline."""
    objective, knobs = setup.objective, list(setup.space.domains)
    limited = bool(objective.limits)
    top: Table = [["trial", "status", objective.metric, "speedup", "verify_ms", "settings",
                   *(["limits"] if limited else [])]]
    search = search_rows(rows)
    order = ranked([r for r in search if r.done], "score", objective.mode)[:top_n]
    ids = {r.trial_id for r in order}
    for row in [*order, *(r for r in search if r.baseline and r.trial_id not in ids)]:
        config, ran = row_configs(row.flat(), knobs)
        config.update({WEIGHTS: DUMMY} if row.cell(WEIGHTS) == DUMMY else {})
        label = " (baseline)" if row.baseline else ""
        broken = row.cell(BREAKS)
        top.append([row.trial_id + label, row.status, _cell(row.score),
                    f"{row.speedup:.3f}x" if row.speedup is not None else "-",
                    _cell(row.cell("verify_ms")), settings_text(config, knobs, ran),
                    *([_cell(broken) if isinstance(broken, str) else "kept"]
                      if limited else [])])
    return top


def failure_table(rows: Sequence[ResultRow]) -> Table:
    """Failures by kind (in the kinds' order): how many, the first, its message and hint."""
    failures: Table = [["kind", "trials", "example", "message", "hint"]]
    failed = [r for r in rows if r.failure_kind is not None]
    for kind in sorted({str(r.failure_kind) for r in failed}):
        group = [r for r in failed if r.failure_kind == kind]
        first = group[0]
        failures.append([kind, str(len(group)), first.trial_id,
                         " ".join(str(first.failure or "").split())[:300],
                         _cell(first.hint) if isinstance(first.hint, str) else "-"])
    return failures


def level_table(setup: Setup, df: pd.DataFrame, confirm_data: Confirm | None
                ) -> tuple[Table, str]:
    """The winner per concurrency level with its figure (the confirm interval where it was
    confirmed, else the search's mean), and whether one config wins them all."""
    data = ConfirmRecord.of(confirm_data)
    if data is None or not data.per_level:
        return [], ""
    knobs = list(setup.space.domains)
    rows = by_id(rows_of(df))
    table: Table = [["concurrency", "decision", "winner", "its figure", "settings"]]
    for item in data.per_level:
        d = item.decision
        level, column = item.level, str(item.metric)
        cand = data.entry(d.label)
        entry = (cand.levels or {}).get(str(level)) if cand is not None else None
        row = rows.get(d.source_trial) if d.source_trial else None
        if entry:
            figure = f"{column} {entry.objective.text()}"
        else:
            figure = f"{column} {_cell(row.cell(column))}" if row is not None and row.has(column) \
                else "-"
        config = d.config
        table.append([f"{level}{' (--decide-at)' if level == setup.objective.decide_at else ''}",
                      str(d.kind), f"{d.label or '-'} ({d.source_trial or '-'})",
                      figure, "-" if config is None else settings_text(
                          config, knobs, trial_ran(setup.out_dir, d.source_trial, config))])
    return table, str(data.same_config_text or "")


# ---------------------------------------------------------------- rendering


def render_plots(setup: Setup, df: pd.DataFrame, confirm_data: Confirm | None
                 ) -> list[Plot]:
    """Write the PNGs that have something to show into DIR/plots/; return them."""
    folder = setup.spec.out_dir
    metric, mode = setup.objective.metric, setup.objective.mode
    knobs = list(setup.space.domains)
    confirm = ConfirmRecord.of(confirm_data)
    chosen = confirm.decided.source_trial if confirm is not None else None
    candidates = [
        (Plot(f"{PLOTS_DIR}/objective.png", "objective per trial",
              f"{metric} per trial in launch order: failed trials marked at the bottom with "
              "their failure kind, the baseline as a dashed line, confirm launches after the "
              "divider"),
         lambda p: plots.objective_by_trial(df, metric, p, chosen)),
        (Plot(f"{PLOTS_DIR}/confirm.png", "confirm stage",
              "confirm stage: mean and 95% interval of each configuration over fresh launches"),
         lambda p: plots.confirm_intervals(confirm_data, p)),
        (Plot(f"{PLOTS_DIR}/knobs.png", "metric by knob value",
              f"{metric} by the value of each knob"),
         lambda p: plots.knob_effects(df, metric, knobs, p)),
        (Plot(f"{PLOTS_DIR}/parallel.png", "parallel coordinates",
              "parallel coordinates of the best completed trials"),
         lambda p: plots.parallel_coordinates(df, metric, mode, knobs, p)),
        (Plot(f"{PLOTS_DIR}/pareto.png", "throughput against latency",
              f"{metric} against {pareto.latency_metric(results.search_rows(df), setup.objective)}, "
              "per concurrency level: each search trial "
              "(hollow red: outside the limits), the Pareto front of those within, the limits "
              "as dashed lines, the baseline and the chosen config"),
         lambda p: pareto.pareto(df, setup.objective, p,
                                 pareto.chosen_trials(setup.objective, confirm_data))),
        (Plot(f"{PLOTS_DIR}/time_split.png", "where the time goes",
              "the measured split of a cycle (draft vs verify) or of a verify pass "
              "(compute vs exposed communication)"),
         lambda p: plots.time_split(df, metric, mode, p)),
        (Plot(f"{PLOTS_DIR}/startup.png", "time to ready",
              "time to ready per trial in launch order: loading weights (light: random "
              "weights), capturing CUDA graphs, and the rest, from the server's own log"),
         lambda p: readiness.plot(df, p)),
    ]
    shown = []
    for plot, draw in candidates:
        path = folder / plot.file
        if draw(path):
            shown.append(plot)
        else:  # a plot of an earlier state with nothing to show now
            path.unlink(missing_ok=True)
    return shown


def render(setup: Setup, df: pd.DataFrame, confirm_data: Confirm | None,
           exp: Experiment | None = None) -> Path:
    """Write DIR/report.html and DIR/plots/*.png; return the HTML's path."""
    shown = render_plots(setup, df, confirm_data)
    folder = setup.spec.out_dir
    page = html_page(facts(setup, df, confirm_data, exp=exp), folder, shown)
    path = folder / REPORT_HTML
    path.write_text(page)
    return path
