"""The trade-off plot: the objective (throughput) against a latency metric, one panel per
concurrency level, each search trial a point (hollow red: outside the limits), the Pareto
front of the trials within the limits, the limits as lines, the baseline and the chosen
config marked. Headless (a Figure and the Agg canvas, no pyplot)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tuner.limits import Limit, level_column
from tuner.output.plots import save_png
from tuner.output.results import feasible, search_rows
from tuner.record.confirm import ConfirmRecord
from tuner.record.rows import TRIAL_ID
from tuner.spec import Objective

WITHIN, OUTSIDE, FRONT, BEST = "#1f77b4", "#d62728", "#2ca02c", "#2ca02c"
# The latency a trade-off is drawn against when no limit names one: bench_serving's, the
# proxy's verify pass.
LATENCIES = ("p99_itl_ms", "median_itl_ms", "p99_ttft_ms", "mean_tpot_ms",
             "median_e2e_latency_ms", "verify_ms")


def latency_metric(df: pd.DataFrame, objective: Objective) -> str | None:
    """The first limited ``*_ms`` metric, else the first of LATENCIES the trials report."""
    named = [lim.metric for lim in objective.limits if lim.metric.endswith("_ms")]
    for name in [*named, *LATENCIES]:
        if name != objective.metric and name in df and df[name].notna().any():
            return name
    return None


def front(points: Sequence[tuple[float, float]], mode: str) -> list[int]:
    """Indices of the points no other point beats on both axes (x: latency, lower is
    better; y: the objective, ``mode``), in order of latency."""
    sign = 1.0 if mode == "max" else -1.0
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -sign * points[i][1]))
    out: list[int] = []
    best = -math.inf
    for i in order:
        if sign * points[i][1] > best:
            out.append(i)
            best = sign * points[i][1]
    return out


def _panel(ax: Axes, df: pd.DataFrame, objective: Objective, latency: str,
           level: int | None, chosen: str | None) -> bool:
    levels = objective.levels if level is not None else ()
    y_col = level_column(objective.metric, level, levels)
    x_col = level_column(latency, level, levels)
    if x_col not in df or y_col not in df:
        return False
    rows = df[df[x_col].notna() & df[y_col].notna() & df["status"].isin(["ok", "stopped"])]
    if len(rows) < 2:
        return False
    inside = feasible(rows, level, objective)
    kept = "within the limits" if objective.limits else "search trials"
    for mask, color, label in ((inside, WITHIN, kept), (~inside, OUTSIDE, "outside the limits")):
        part = rows[mask]
        if len(part):
            ax.scatter(part[x_col], part[y_col], s=30, zorder=3, label=label,
                       facecolors=color if color == WITHIN else "none", edgecolors=color)
    ok = rows[inside]
    points = [(float(x), float(y)) for x, y in zip(ok[x_col], ok[y_col], strict=True)]
    on_front = [points[i] for i in front(points, objective.mode)]
    if len(on_front) > 1:
        ax.step([p[0] for p in on_front], [p[1] for p in on_front],
                where="post", color=FRONT, linewidth=1.5, label="Pareto front", zorder=2)
    _limit_lines(ax, objective.limits, x_col, y_col, latency, objective.metric)
    for mark, trial, size, color, label in (("D", _baseline(rows), 60, "black", "baseline"),
                                            ("*", chosen, 240, BEST, "chosen")):
        at = rows[rows[TRIAL_ID] == trial] if trial else rows.iloc[0:0]
        if len(at):
            ax.scatter(at[x_col], at[y_col], marker=mark, s=size,
                       color=color, edgecolor="black", zorder=4, label=f"{label} ({trial})")
    ax.set_xlabel(f"{x_col} (lower is better)")
    ax.set_ylabel(y_col)
    ax.set_title(f"concurrency {level}" if level is not None else
                 f"{y_col} against {x_col}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return True


def _baseline(rows: pd.DataFrame) -> str | None:
    base = rows[rows["baseline"]] if "baseline" in rows else rows.iloc[0:0]
    return str(base[TRIAL_ID].iloc[0]) if len(base) else None


def _limit_lines(ax: Axes, limits: Sequence[Limit], x_col: str, y_col: str, latency: str,
                 metric: str) -> None:
    for lim in limits:
        if lim.metric in (latency, x_col):
            ax.axvline(lim.bound, color=OUTSIDE, linestyle="--",
                       linewidth=1, label=f"limit {lim.text()}")
        elif lim.metric in (metric, y_col):
            ax.axhline(lim.bound, color=OUTSIDE, linestyle="--",
                       linewidth=1, label=f"limit {lim.text()}")


def pareto(df: pd.DataFrame, objective: Objective, path: Path,
           chosen: Mapping[int | None, str | None]) -> bool:
    """Write the plot; False when there is no latency metric or fewer than two trials.
    ``chosen``: the decided trial per level (None: the plain names)."""
    search = search_rows(df)
    latency = latency_metric(search, objective) if len(search) else None
    if latency is None:
        return False
    levels: list[int | None] = list(objective.levels) if objective.per_level else [None]
    fig = Figure(figsize=(min(5.2 * len(levels), 16), 4.4))
    drawn = 0
    for i, level in enumerate(levels):
        ax = fig.add_subplot(1, len(levels), i + 1)
        if _panel(ax, search, objective, latency, level, chosen.get(level)):
            drawn += 1
        else:
            fig.delaxes(ax)
    if not drawn:
        return False
    within = f"; limits: {', '.join(lim.text() for lim in objective.limits)}" \
        if objective.limits else ""
    fig.suptitle(f"trade-off: {objective.metric} against {latency} (search trials{within})",
                 fontsize=10)
    fig.tight_layout()  # fits the panels and the title: no cropping pass
    save_png(fig, path, crop=False)
    return True


def chosen_trials(objective: Objective, confirm_data: ConfirmRecord | Mapping[str, object] | None
                  ) -> dict[int | None, str | None]:
    """The decided trial at each level (None: the level the search decided at)."""
    data = ConfirmRecord.of(confirm_data)
    if data is None:
        return {None: None}
    out: dict[int | None, str | None] = {None: data.decided.source_trial}
    for item in data.per_level:
        out[item.level] = item.decision.source_trial
    return out
