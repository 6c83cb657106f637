"""The report's facts as pages: Markdown (DIR/best/report.md) and HTML (DIR/report.html,
its plots inlined). Plain data in, text out: ``tuner.output.report`` gathers the facts."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

Table = list[list[str]]  # the first row is the header

SUSPECT = ("Failed, but only beside the same values of the levers that can change that "
           "failure (or never at the end likelier to mend it): no verdict. The search retries "
           "such a value beside other values of those levers, within a share of its budget, and "
           "does not launch it again beside the ones it failed with.")


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
