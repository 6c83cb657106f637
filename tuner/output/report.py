"""The experiment report: DIR/report.html with its PNG plots in DIR/plots/, and the same facts
as Markdown for DIR/best/report.md. ``servetune report DIR`` renders both from what is on
disk (servetune.json, results.jsonl, confirm.json, run.json, ruled_out.json,
suspects.json)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from search_spaces.knobs import DUMMY, WEIGHTS
from tuner.output import pareto, partners, plots, proposals, readiness
from tuner.output import ruled_out as failure_memory
from tuner.output.confirm_text import lines as confirm_lines
from tuner.output.files import RUN_JSON, read_json
from tuner.output.progress import settings_text
from tuner.output.ran import row_configs, trial_ran
from tuner.output.results import BREAKS, search_rows
from tuner.setup import Setup
from tuner.stats import Interval
from tuner.weights import LIMIT

REPORT_HTML = "report.html"
SUSPECT = ("Failed, but only beside the same values of the levers that can change that "
           "failure (or never at the end likelier to mend it): no verdict. The search retries "
           "such a value beside other values of those levers, within a share of its budget, and "
           "does not launch it again beside the ones it failed with.")
PLOTS_DIR = "plots"
Table = list[list[str]]  # the first row is the header


@dataclass
class Plot:
    file: str
    title: str
    caption: str


@dataclass
class Facts:
    """Everything the report says, in plain data (rendered as Markdown and as HTML)."""

    name: str
    folder: str
    workload: Table
    space: Table
    how: Table
    decision: str
    decision_kind: str
    chosen: str
    confirm: list[str]
    speculative: str | None
    top: Table
    failures: Table
    notes: list[str] = field(default_factory=list)
    counts: str = ""
    levels: Table = field(default_factory=list)  # the winner per concurrency level
    levels_text: str = ""
    startup: Table = field(default_factory=list)  # time to ready per stage and weights
    campaign: list[str] = field(default_factory=list)  # wall time, what random weights saved
    ruled_out: Table = field(default_factory=list)  # setting, kind, failing trials, evidence
    suspects: Table = field(default_factory=list)  # failed, not ruled out: where, why not


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def facts(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None,
          top_n: int = 8) -> Facts:
    spec, objective = setup.spec, setup.objective
    out = spec.out_dir
    knobs = list(setup.space.domains)
    run = read_json(out / RUN_JSON) or {}
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
                                     if spec.search == "staged" else "")
            + (", failure-aware" if spec.failure_aware else "")],
           ["trials", f"{spec.samples or 'sized from the space'} (the baseline first), "
                      f"{spec.rounds} benchmark rounds each"],
           ["early stopping", spec.scheduler],
           ["objective", f"{objective.metric} ({objective.mode}imize), mean over a trial's rounds"],
           ["confirm", f"top {spec.confirm_top} and the baseline, fresh launches alternating "
                       f"until decided, at most {spec.confirm} each (ratio of launch means, "
                       "Welch, 95% over the looks)" if spec.confirm else "skipped (--confirm 0)"],
           ["resources", f"{run.get('nodes', '?')} node(s), GPUs per node "
                         f"{run.get('gpus_per_node', '?')}, {run.get('gpus_per_trial', '?')} "
                         "GPU(s) per trial (a whole node)"]]
    if objective.limits:
        how.append(["limits", ", ".join(lim.text() for lim in objective.limits)
                    + ": a trial outside them is infeasible, never chosen; in the confirm "
                    "stage a config must keep them over its whole 95% interval"])
    if objective.per_level:
        how.append(["concurrency", f"each round measures levels "
                    f"{', '.join(map(str, objective.levels))}; the search optimises "
                    f"{objective.decide_at} (--decide-at), each level gets its own winner"])
    decision = dict((confirm_data or {}).get("decision") or {})
    chosen_config = decision.get("config")
    # What its trial's server ran, unless the decision serves it otherwise (speculative off).
    ran = {} if decision.get("speculative") is False else \
        trial_ran(out, decision.get("source_trial"), chosen_config or {})
    chosen = "-" if chosen_config is None else settings_text(chosen_config, knobs, ran)
    search = search_rows(df)
    limited = bool(objective.limits)
    top: Table = [["trial", "status", objective.metric, "speedup", "verify_ms", "settings",
                   *(["limits"] if limited else [])]]
    if not search.empty:
        scored = search[search["score"].notna() & (search["status"] == "ok")]
        order = scored.sort_values("score", ascending=objective.mode == "min").head(top_n)
        base = search[search["baseline"] & ~search["trial_id"].isin(order["trial_id"])]
        for _, row in pd.concat([order, base]).iterrows():
            config, ran = row_configs(row, knobs)
            config.update({WEIGHTS: DUMMY} if row.get(WEIGHTS) == DUMMY else {})
            label = " (baseline)" if row["baseline"] else ""
            top.append([str(row["trial_id"]) + label, str(row["status"]), _cell(row["score"]),
                        f"{row['speedup']:.3f}x" if _cell(row["speedup"]) != "-" else "-",
                        _cell(row.get("verify_ms")), settings_text(config, knobs, ran),
                        *([_cell(row.get(BREAKS)) if isinstance(row.get(BREAKS), str)
                           else "kept"] if limited else [])])
    failures: Table = [["kind", "trials", "example", "message", "hint"]]
    failed = df[df["failure_kind"].notna()] if not df.empty else df
    for kind, group in (failed.groupby("failure_kind") if len(failed) else []):
        first = group.iloc[0]
        failures.append([str(kind), str(len(group)), str(first["trial_id"]),
                         " ".join(str(first.get("failure") or "").split())[:300],
                         _cell(first.get("hint")) if isinstance(first.get("hint"), str) else "-"])
    ruled, suspects = failure_memory.load(out)
    notes = setup.space_notes()
    counts = ", ".join(f"{v} {k}" for k, v in sorted(df["status"].value_counts().items())) \
        if not df.empty else "no trials"
    spec_text = ((confirm_data or {}).get("speculative") or {}).get("text")
    if setup.weights.applies or setup.weights.note:
        how.append(["weights", setup.weights.summary()])
    how += [["not launched", line.partition(": ")[2]] for line in proposals.lines(out)]
    how += [["partners completed", line.partition(": ")[2]] for line in partners.lines(out)]
    notes += proposals.refusals(out)
    if WEIGHTS in df and (df[WEIGHTS] == DUMMY).any():
        notes.append(f"random weights: {LIMIT}")
    startup, campaign = readiness.section(df, out)
    return Facts(spec.name, str(out), workload, space, how,
                 decision.get("text") or "no decision (the run did not complete)",
                 str(decision.get("kind") or "none"), chosen,
                 [ln for ln in confirm_lines(confirm_data or {}) if ln.startswith("  ")
                  or ln.startswith("confirm")], spec_text, top, failures, notes, counts,
                 *level_table(setup, df, confirm_data), startup, campaign,
                 failure_memory.ruled_out_table(ruled), failure_memory.suspects_table(suspects))


def level_table(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None
                ) -> tuple[Table, str]:
    """The winner per concurrency level with its figure (the confirm interval where it was
    confirmed, else the search's mean), and whether one config wins them all."""
    data = confirm_data or {}
    items = data.get("per_level") or []
    if not items:
        return [], ""
    knobs = list(setup.space.domains)
    entries = {e["label"]: e for e in data.get("entries") or []}
    table: Table = [["concurrency", "decision", "winner", "its figure", "settings"]]
    for item in items:
        d = item.get("decision") or {}
        level, column = item["level"], str(item.get("metric"))
        entry = (entries.get(d.get("label")) or {}).get("levels", {}).get(str(level))
        if entry:
            figure = f"{column} {Interval(**entry['objective']).text()}"
        else:
            rows = df[df["trial_id"] == d.get("source_trial")] if not df.empty else df
            figure = f"{column} {_cell(rows[column].iloc[0])}" if len(rows) and column in rows \
                else "-"
        config = d.get("config")
        table.append([f"{level}{' (--decide-at)' if level == setup.objective.decide_at else ''}",
                      str(d.get("kind")), f"{d.get('label') or '-'} ({d.get('source_trial') or '-'})",
                      figure, "-" if config is None else settings_text(
                          config, knobs, trial_ran(setup.out_dir, d.get("source_trial"), config))])
    return table, str(data.get("same_config_text") or "")


# ---------------------------------------------------------------- Markdown


def _md_table(table: Table) -> list[str]:
    if len(table) < 2:
        return ["(none)"]

    def esc(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    head = table[0] if any(table[0]) else ["", ""]
    lines = ["| " + " | ".join(esc(c) for c in head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in table[1:]]
    return lines


def markdown(f: Facts) -> str:
    lines = [f"# servetune report: {f.name}", "", f"Experiment folder: `{f.folder}`", "",
             "## Decision", "", f.decision, ""]
    if f.chosen != "-":
        lines += [f"Chosen settings: `{f.chosen}`", "",
                  "Launch: `best/launch.sh` (env: `best/env`; NCCL tuner-plugin rule: "
                  "`best/nccl-tuner.csv`).", ""]
    if f.confirm:
        lines += ["### Evidence: the confirm stage", "", "```", *f.confirm, "```", ""]
    if f.levels:
        lines += ["### The winner per concurrency level", "", *_md_table(f.levels), "",
                  f.levels_text, ""]
    if f.speculative:
        lines += ["### Is speculative decoding worth it here?", "", f.speculative, ""]
    lines += ["## What was searched", "", *_md_table(f.space), "", "### Workload", "",
              *_md_table(f.workload), "", "## How", "", *_md_table(f.how), "",
              f"Trials: {f.counts}.", "", "## Best trials of the search", "",
              *_md_table(f.top), "", "## Failures by kind", "", *_md_table(f.failures), "",
              *(["### Ruled out, and on what evidence", "",
                 "Not launched again: each failed where nothing else could explain it.", "",
                 *_md_table(f.ruled_out), ""] if f.ruled_out else []),
              *(["### Suspect, not ruled out", "", SUSPECT, "", *_md_table(f.suspects), ""]
                if f.suspects else []),
              "## Time to ready", "", *[f"- {line}" for line in f.campaign], "",
              *_md_table(f.startup), ""]
    if f.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in f.notes], ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px auto;
       max-width: 1100px; color: #1d1d1d; line-height: 1.4; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.decision { padding: 12px 16px; border-radius: 6px; background: #eef5ff; border-left: 5px solid #1f77b4; }
.decision.default, .decision.unconfirmed { background: #fff7e6; border-left-color: #ff9f1c; }
.decision.none { background: #fdecea; border-left-color: #d62728; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
figure { margin: 16px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; font-size: 0.85em; }
code { background: #f4f4f4; padding: 1px 4px; }
"""


def _html_table(table: Table) -> str:
    if len(table) < 2:
        return "<p>(none)</p>"
    head = "" if not any(table[0]) else \
        "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in table[0]) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in table[1:])
    return f"<table>{head}{body}</table>"


def _figure(folder: Path, plot: Plot) -> str:
    data = base64.b64encode((folder / plot.file).read_bytes()).decode()
    return (f'<figure id="{html.escape(Path(plot.file).stem)}"><img alt="{html.escape(plot.title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(plot.caption)} '
            f"(<code>{html.escape(plot.file)}</code>)</figcaption></figure>")


def html_page(f: Facts, folder: Path, shown: Sequence[Plot]) -> str:
    e = html.escape
    parts = [f"<h1>servetune report: {e(f.name)}</h1>",
             f"<p>Experiment folder: <code>{e(f.folder)}</code>. Trials: {e(f.counts)}.</p>",
             "<h2>Decision</h2>",
             f'<div class="decision {e(f.decision_kind)}"><p>{e(f.decision)}</p>'
             + (f"<p>Chosen settings: <code>{e(f.chosen)}</code> &mdash; launch with "
                "<code>best/launch.sh</code>; NCCL tuner-plugin rule in "
                "<code>best/nccl-tuner.csv</code>.</p>" if f.chosen != "-" else "")
             + "</div>"]
    if f.confirm:
        parts.append("<h3>Evidence: the confirm stage</h3><pre>"
                     + e("\n".join(f.confirm)) + "</pre>")
    if f.levels:
        parts.append("<h3>The winner per concurrency level</h3>" + _html_table(f.levels)
                     + f"<p>{e(f.levels_text)}</p>")
    if f.speculative:
        parts.append(f"<h3>Is speculative decoding worth it here?</h3><p>{e(f.speculative)}</p>")
    parts.append("<h2>Plots</h2>")
    parts += [_figure(folder, p) for p in shown] or ["<p>No plots: no trial has a score.</p>"]
    parts += ["<h2>Best trials of the search</h2>", _html_table(f.top),
              "<h2>Failures by kind</h2>", _html_table(f.failures),
              *(["<h3>Ruled out, and on what evidence</h3><p>Not launched again: each failed "
                 "where nothing else could explain it.</p>", _html_table(f.ruled_out)]
                if f.ruled_out else []),
              *([f"<h3>Suspect, not ruled out</h3><p>{e(SUSPECT)}</p>",
                 _html_table(f.suspects)] if f.suspects else []),
              "<h2>Time to ready</h2>", *[f"<p>{e(line)}</p>" for line in f.campaign],
              _html_table(f.startup),
              "<h2>What was searched</h2>", _html_table(f.space),
              "<h3>Workload</h3>", _html_table(f.workload),
              "<h2>How</h2>", _html_table(f.how)]
    if f.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in f.notes) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>servetune report: {e(f.name)}</title>"
            '<link rel="icon" href="data:,">'
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


# ---------------------------------------------------------------- rendering


def render_plots(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None
                 ) -> list[Plot]:
    """Write the PNGs that have something to show into DIR/plots/; return them."""
    folder = setup.spec.out_dir
    metric, mode = setup.objective.metric, setup.objective.mode
    knobs = list(setup.space.domains)
    chosen = ((confirm_data or {}).get("decision") or {}).get("source_trial")
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
              f"{metric} against {pareto.latency_metric(search_rows(df), setup.objective)}, "
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


def render(setup: Setup, df: pd.DataFrame, confirm_data: Mapping[str, Any] | None) -> Path:
    """Write DIR/report.html and DIR/plots/*.png; return the HTML's path."""
    shown = render_plots(setup, df, confirm_data)
    folder = setup.spec.out_dir
    page = html_page(facts(setup, df, confirm_data), folder, shown)
    path = folder / REPORT_HTML
    path.write_text(page)
    return path
