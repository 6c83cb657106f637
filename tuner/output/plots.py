"""The report's PNG plots (matplotlib, headless: Figure objects and the Agg canvas, no pyplot
state, no display). Each function writes one file and returns False when it has nothing to
show."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from tuner.output.progress import short_name
from tuner.record.confirm import ConfirmRecord
from tuner.record.events import NO_SPECULATIVE
from tuner.record.rows import TRIAL_ID
from tuner.stats import finite

DPI = 110
OK, STOPPED, FAILED, CONFIRM, REFERENCE, BEST = ("#1f77b4", "#9e9e9e", "#d62728", "#ff7f0e",
                                                 "#9467bd", "#2ca02c")
# Where each part of a speculative cycle or a verify pass was measured (column, label).
SPLITS = (
    ("draft vs verify (SGLang /metrics)", (("verify_ms", "verify"), ("draft_ms", "draft"))),
    ("compute vs exposed communication (proxy)", (
        ("compute_ms", "compute (measured: collectives as no-ops)"),
        ("exposed_comm_ms", "exposed communication"), ("assumed_draft_ms", "draft (assumed)"))),
)


def save_png(fig: Figure, path: Path, crop: bool = True) -> None:
    """Written whole, then renamed: a ``report`` during a run and the run's own end may
    render the same plot at once, and each reads back a complete file. ``crop`` trims the
    image to what was drawn (legends outside the axes); a figure that tight_layout already
    fitted skips it, since cropping draws the whole figure once more."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fig.savefig(tmp, dpi=DPI, bbox_inches="tight" if crop else None, facecolor="white",
                format="png")
    tmp.replace(path)


def _phase(df: pd.DataFrame, phase: str) -> pd.DataFrame:
    if "phase" not in df:
        return df if phase == "search" else df.iloc[0:0]
    return df[df["phase"].fillna("search") == phase]


def baseline_score(df: pd.DataFrame) -> float | None:
    base = _phase(df, "search")
    base = base[base["baseline"] & base["score"].notna()] if len(base) else base
    return finite(base["score"].iloc[0]) if len(base) else None


# ---------------------------------------------------------------- objective per trial


def objective_by_trial(df: pd.DataFrame, metric: str, path: Path,
                       best_trial: str | None = None) -> bool:
    """Every trial in launch order: completed, stopped early, failed (marked at the bottom),
    the confirm launches after a divider, the baseline as a line."""
    if df.empty:
        return False
    fig = Figure(figsize=(9, 4.2))
    ax = fig.add_subplot()
    df = df.sort_values("order")
    x = {tid: i + 1 for i, tid in enumerate(df[TRIAL_ID])}
    search, confirm = _phase(df, "search"), _phase(df, "confirm")
    variant = confirm["variant"] if "variant" in confirm else pd.Series(dtype=object)
    reference = confirm[variant == NO_SPECULATIVE] if len(confirm) else confirm
    repeats = confirm[variant != NO_SPECULATIVE] if len(confirm) else confirm
    groups = [(search[search["status"] == "ok"], OK, "o", "completed"),
              (search[search["status"] == "stopped"], STOPPED, "o", "stopped early"),
              (repeats[repeats["status"] == "ok"], CONFIRM, "s", "confirm launch"),
              (reference[reference["status"] == "ok"], REFERENCE, "D",
               "without speculative decoding")]
    for rows, color, marker, label in groups:
        rows = rows[rows["score"].notna()]
        if len(rows):
            ax.scatter([x[t] for t in rows[TRIAL_ID]], rows["score"], color=color,
                       marker=marker, s=36, label=label, zorder=3,
                       facecolors="none" if label == "stopped early" else color)
    failed = df[df["status"] == "failed"]
    if len(failed):
        ax.scatter([x[t] for t in failed[TRIAL_ID]], [0.03] * len(failed), color=FAILED,
                   marker="x", s=50, label=f"failed ({len(failed)})", zorder=3,
                   transform=ax.get_xaxis_transform())
        for _, row in failed.iterrows():
            kind = row.get("failure_kind")
            ax.annotate(str(kind or "failed"), (x[row[TRIAL_ID]], 0.07),
                        xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        color=FAILED, ha="center", va="bottom")
    base = baseline_score(df)
    if base is not None:
        ax.axhline(base, color="black", linestyle="--", linewidth=1,
                   label=f"baseline {base:.4g}")
    if best_trial in x:
        row = df[df[TRIAL_ID] == best_trial].iloc[0]
        if finite(row["score"]) is not None:
            ax.scatter([x[best_trial]], [row["score"]], marker="*", s=220, color=BEST,
                       edgecolor="black", zorder=4, label=f"chosen ({best_trial})")
    if len(confirm):
        first = min(x[t] for t in confirm[TRIAL_ID])
        ax.axvline(first - 0.5, color="#555555", linestyle=":", linewidth=1)
        ax.annotate("confirm stage", (first - 0.4, 0.97), xycoords=("data", "axes fraction"),
                    fontsize=8, va="top", color="#555555")
    ax.set_xlabel("trial, in launch order")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per trial (mean over its rounds)")
    ax.grid(alpha=0.3)
    ax.set_xlim(0.3, len(x) + 0.7)
    lows = [v for v in df["score"].dropna()] + ([base] if base is not None else [])
    if lows:
        span = max(lows) - min(lows) or abs(max(lows)) * 0.1 or 1.0
        ax.set_ylim(min(lows) - 0.25 * span, max(lows) + 0.15 * span)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    save_png(fig, path)
    return True


# ---------------------------------------------------------------- the metric by knob value


def _label(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "default"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _order(label: str) -> tuple[int, float, str]:
    """"default" first, then numbers by value, then text."""
    try:
        return (1, float(label), label)
    except ValueError:
        return (0 if label == "default" else 2, 0.0, label)


def _values(column: pd.Series) -> list[str]:
    return sorted({_label(v) for v in column}, key=_order)


def knob_effects(df: pd.DataFrame, metric: str, knobs: Sequence[str], path: Path) -> bool:
    """One panel per knob: each search trial's score at the knob's value, the mean per value,
    and how many trials failed at it."""
    search = _phase(df, "search")
    knobs = [k for k in knobs if k in search]
    if search.empty or not knobs:
        return False
    cols = min(3, len(knobs))
    rows_n = math.ceil(len(knobs) / cols)
    fig = Figure(figsize=(4.1 * cols, 3.1 * rows_n))
    rng = random.Random(0)
    base = baseline_score(df)
    for i, knob in enumerate(knobs):
        ax = fig.add_subplot(rows_n, cols, i + 1)
        values = _values(search[knob])
        pos = {v: j for j, v in enumerate(values)}
        ticks = []
        for v in values:
            at = search[search[knob].map(_label) == v]
            scored = at[at["score"].notna() & at["status"].isin(["ok", "stopped"])]
            xs = [pos[v] + rng.uniform(-0.12, 0.12) for _ in range(len(scored))]
            colors = [OK if s == "ok" else STOPPED for s in scored["status"]]
            ax.scatter(xs, scored["score"], c=colors, s=18, alpha=0.8, zorder=3)
            if len(scored):
                ax.plot([pos[v] - 0.25, pos[v] + 0.25], [scored["score"].mean()] * 2,
                        color="black", linewidth=2, zorder=4)
            failed = int((at["status"] == "failed").sum())
            ticks.append(f"{v}\n({failed} failed)" if failed else v)
        if base is not None:
            ax.axhline(base, color="black", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(values)), ticks, fontsize=7,
                      rotation=30 if max(len(t) for t in values) > 8 else 0)
        ax.set_title(short_name(knob), fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3, axis="y")
        if i % cols == 0:
            ax.set_ylabel(metric, fontsize=8)
    fig.suptitle(f"{metric} by value of each knob (bar: mean; dashed: baseline; "
                 f"grey: stopped early)", fontsize=10)
    fig.tight_layout()
    save_png(fig, path, crop=False)
    return True


# ---------------------------------------------------------------- parallel coordinates


def parallel_coordinates(df: pd.DataFrame, metric: str, mode: str, knobs: Sequence[str],
                         path: Path, top: int = 10) -> bool:
    """The best completed search trials (and the baseline) as lines across the knob axes."""
    search = _phase(df, "search")
    knobs = [k for k in knobs if k in search]
    done = search[(search["status"] == "ok") & search["score"].notna()] if len(search) else search
    if done.empty or not knobs:
        return False
    best = done.sort_values("score", ascending=mode == "min").head(top)
    shown = pd.concat([best, done[done["baseline"] & ~done[TRIAL_ID].isin(best[TRIAL_ID])]])
    axes = [*knobs, metric]
    cats = {k: _values(search[k]) for k in knobs}
    lo, hi = float(shown["score"].min()), float(shown["score"].max())

    def y(axis: str, value: Any) -> float:
        if axis == metric:
            return 0.5 if hi == lo else (float(value) - lo) / (hi - lo)
        values = cats[axis]
        return 0.5 if len(values) == 1 else values.index(_label(value)) / (len(values) - 1)

    fig = Figure(figsize=(max(7.0, 1.3 * len(axes)), 4.6))
    ax = fig.add_subplot()
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    lines = shown[~shown["baseline"]]["score"]  # colour by the top trials' own range
    c_lo, c_hi = (float(lines.min()), float(lines.max())) if len(lines) else (lo, hi)
    norm = Normalize(c_lo, c_hi if c_hi > c_lo else c_lo + 1)
    cmap = colormaps["viridis" if mode == "max" else "viridis_r"]
    for _, row in shown.iloc[::-1].iterrows():
        ys = [y(a, row["score"] if a == metric else row[a]) for a in axes]
        if row["baseline"]:
            ax.plot(range(len(axes)), ys, color="black", linestyle="--", linewidth=1.6,
                    label=f"baseline {row[TRIAL_ID]}", zorder=4)
        else:
            ax.plot(range(len(axes)), ys, color=cmap(norm(row["score"])), linewidth=1.8,
                    alpha=0.9, zorder=3)
    for i, axis in enumerate(axes):
        ax.axvline(i, color="#444444", linewidth=0.8, zorder=1)
        if axis == metric:
            labels = [(0.0, f"{lo:.4g}"), (1.0, f"{hi:.4g}")] if hi > lo else [(0.5, f"{lo:.4g}")]
        else:
            values = cats[axis]
            labels = [(y(axis, v if v != "default" else None), v) for v in values]
        for pos, text in labels:
            ax.annotate(text, (i, pos), xytext=(3, 0), textcoords="offset points", fontsize=7,
                        va="center", ha="left", zorder=5,
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                              "alpha": 0.7})
    ax.set_xticks(range(len(axes)), [short_name(a) for a in axes], rotation=20, fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(axes) - 0.4)
    ax.set_ylim(-0.08, 1.08)
    ax.set_title(f"top {len(best)} completed trials across the knobs (colour: {metric})")
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=metric, pad=0.01)
    if shown["baseline"].any():
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False)
    save_png(fig, path)
    return True


# ---------------------------------------------------------------- where the time goes


def time_split(df: pd.DataFrame, metric: str, mode: str, path: Path, top: int = 6) -> bool:
    """Stacked bars of the measured parts of a cycle (draft vs verify) or of a verify pass
    (compute vs exposed communication) for the baseline and the best completed trials."""
    search = _phase(df, "search")
    done = search[(search["status"] == "ok") & search["score"].notna()] if len(search) else search
    split = next(((title, [(c, n) for c, n in parts if c in done and done[c].notna().any()])
                  for title, parts in SPLITS
                  if all(c in done and done[c].notna().any() for c, _ in parts[:2])), None)
    if done.empty or split is None:
        return False
    title, parts = split
    best = done.sort_values("score", ascending=mode == "min").head(top)
    rows = pd.concat([done[done["baseline"]], best[~best["baseline"]]])
    fig = Figure(figsize=(8, 0.55 * len(rows) + 1.6))
    ax = fig.add_subplot()
    labels = [f"{r[TRIAL_ID]}{' (baseline)' if r['baseline'] else ''}"
              for _, r in rows.iterrows()]
    left = [0.0] * len(rows)
    colors = ["#4c72b0", "#dd8452", "#55a868"]
    for (column, name), color in zip(parts, colors, strict=False):
        values = [finite(v) or 0.0 for v in rows[column]]
        ax.barh(labels, values, left=left, color=color, label=name)
        for i, (start, v) in enumerate(zip(left, values, strict=True)):
            if v > 0:
                ax.annotate(f"{v:.3g}", (start + v / 2, i), ha="center", va="center",
                            fontsize=7, color="white")
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.invert_yaxis()
    drafts = any("draft" in column for column, _ in parts)
    ax.set_xlabel("ms per cycle (verify pass + draft)" if drafts else "ms per verify pass")
    ax.set_title(f"where the time goes: {title}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(parts), fontsize=8,
              frameon=False)
    ax.grid(alpha=0.3, axis="x")
    save_png(fig, path)
    return True


# ---------------------------------------------------------------- the confirm stage


def confirm_intervals(data: ConfirmRecord | Mapping[str, Any] | None, path: Path) -> bool:
    """Mean and 95% interval per confirmed configuration, the baseline's interval as a band,
    the speculative-off reference as a point."""
    record = ConfirmRecord.of(data)
    if record is None or not record.entries:
        return False
    entries = record.entries
    fig = Figure(figsize=(8, 0.6 * (len(entries) + 1) + 1.5))
    ax = fig.add_subplot()
    labels = []
    decided = record.decided.label
    for i, e in enumerate(entries):
        iv = e.objective
        labels.append(f"{e.label} ({e.source_trial or '-'})")
        for s in e.launch_scores:
            ax.scatter([s], [i], color="#888888", s=12, zorder=3)
        if iv.mean is None:
            continue
        color = BEST if e.label == decided and e.label != "baseline" else (
            "black" if e.label == "baseline" else CONFIRM)
        err = None if iv.low is None or iv.high is None else \
            [[iv.mean - iv.low], [iv.high - iv.mean]]
        ax.errorbar([iv.mean], [i], xerr=err, fmt="o", color=color, capsize=5, zorder=4)
        if e.label == "baseline" and iv.low is not None and iv.high is not None:
            ax.axvspan(iv.low, iv.high, color="#cccccc", alpha=0.5, zorder=1,
                       label="baseline 95% interval")
    without = finite(record.speculative.without) if record.speculative else None
    if without is not None:
        labels.append("without speculative decoding")
        ax.scatter([without], [len(entries)], marker="D", color=REFERENCE, s=40, zorder=4)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{record.metric} (dots: single launches; bars: 95% interval of the mean)")
    ax.set_title(f"confirm stage: at most {record.repeats} fresh launches each; "
                 f"decision: {record.decided.kind if record.decision else ''}")
    ax.grid(alpha=0.3, axis="x")
    if any(e.label == "baseline" and e.objective.low is not None for e in entries):
        ax.legend(loc="lower right", fontsize=8)
    save_png(fig, path)
    return True
