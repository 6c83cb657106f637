"""Time to ready as a cost: per trial, launch -> weights loaded -> graphs captured -> ready
(results.csv's ``ready_s`` and ``startup_*`` columns, from SGLang's own log lines), and the
campaign's wall time with what random weights saved.

The saving is an estimate, and says so: each trial on random weights is counted as if it had
loaded the checkpoint in the median time the trials on the checkpoint's weights took (SGLang's
own ``Load weight end. elapsed=`` figures, target and draft added up), less its own load.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from search_spaces.knobs import DUMMY, WEIGHTS
from tuner.output.plots import save_png
from tuner.record.experiment import Folder, loaded

READY = "ready_s"  # servetune's own: launch until the server answers its readiness probe
LOAD = "startup_weights_s"
GRAPHS = "startup_graphs_s"
Table = list[list[str]]


def _numbers(values: Any) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v))]


def _median(values: Any) -> float | None:
    found = _numbers(values)
    return statistics.median(found) if found else None


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _on_dummy(df: pd.DataFrame) -> pd.Series:
    if WEIGHTS not in df:
        return pd.Series(False, index=df.index)
    return df[WEIGHTS] == DUMMY


@dataclass(frozen=True)
class Campaign:
    """The campaign's wall time and what random weights saved (an estimate)."""

    wall_s: float | None  # the first trial's launch to the last trial's end (the journal)
    trials: int
    dummy: int
    real_load_s: float | None  # median load of the checkpoint's weights, measured
    dummy_load_s: float | None  # median load of random weights, measured
    saved_s: float | None  # estimated; None when nothing to compare

    @property
    def saved_share(self) -> float | None:
        """The saving as a share of what the campaign would have taken on real weights."""
        if self.saved_s is None or self.wall_s is None or self.wall_s + self.saved_s <= 0:
            return None
        return self.saved_s / (self.wall_s + self.saved_s)

    def lines(self) -> list[str]:
        out = [f"campaign: {duration(self.wall_s)} wall time for {self.trials} trials "
               f"(first launch to last end), {self.dummy} of them on random weights"]
        if not self.dummy:
            return out
        if self.saved_s is None:
            out.append("saved by random weights: unknown (no trial measured a load of the "
                       "checkpoint's weights to compare with)")
            return out
        share = self.saved_share
        out.append(f"saved by random weights: about {duration(self.saved_s)} (an estimate: "
                   f"{self.dummy} trials x (the checkpoint's median load "
                   f"{duration(self.real_load_s)} - random weights' "
                   f"{duration(self.dummy_load_s)}), measured in this campaign)"
                   + (f", {share:.0%} of the {duration((self.wall_s or 0) + self.saved_s)} "
                      "it would have taken on real weights everywhere" if share is not None
                      else ""))
        return out


def campaign(folder: Folder, df: pd.DataFrame) -> Campaign:
    wall = loaded(folder).wall_s
    if df.empty:
        return Campaign(wall, 0, 0, None, None, None)
    dummy = _on_dummy(df)
    loads = df[LOAD] if LOAD in df else pd.Series(dtype=float)
    real_load = _median(loads[~dummy]) if LOAD in df else None
    dummy_load = _median(loads[dummy]) if LOAD in df else None
    saved = None
    if real_load is not None and int(dummy.sum()):
        own = [v if v is not None and v == v else dummy_load for v in loads[dummy]]
        saved = sum(max(0.0, real_load - (v or 0.0)) for v in own)
    return Campaign(wall, len(df), int(dummy.sum()), real_load, dummy_load, saved)


def table(df: pd.DataFrame) -> Table:
    """Per phase, stage and weights, in launch order: trials and median times."""
    out: Table = [["phase", "stage", "weights", "trials", "time to ready", "weights loaded",
                   "graphs captured"]]
    if df.empty or READY not in df:
        return out
    weights = df[WEIGHTS] if WEIGHTS in df else pd.Series("-", index=df.index)
    keys = list(zip(df["phase"].fillna("search"), df["stage"].fillna("-"), weights,
                    strict=True))
    for key in dict.fromkeys(keys):
        rows = df[[k == key for k in keys]]
        out.append([str(key[0]), str(key[1]), str(key[2]), str(len(rows)),
                    *(duration(_median(rows[c])) if c in rows else "-"
                      for c in (READY, LOAD, GRAPHS))])
    return out


def plot(df: pd.DataFrame, path: Path) -> bool:
    """Time to ready per trial in launch order, split where SGLang's log says."""
    if df.empty or READY not in df or not _numbers(df[READY]):
        return False
    order = df.sort_values("order")
    ready = [v if v == v else 0.0 for v in order[READY].astype(float)]
    load = [v if v == v else 0.0 for v in order.get(LOAD, pd.Series(0.0, index=order.index))
            .astype(float)]
    graphs = [v if v == v else 0.0 for v in order.get(GRAPHS, pd.Series(0.0, index=order.index))
              .astype(float)]
    rest = [max(0.0, r - w - g) for r, w, g in zip(ready, load, graphs, strict=True)]
    dummy = list(_on_dummy(order))
    xs = list(range(len(order)))
    fig = Figure(figsize=(max(6.0, 0.25 * len(xs) + 2), 3.8))
    ax = fig.add_subplot()
    colors = ["#9ecae1" if d else "#1f77b4" for d in dummy]
    ax.bar(xs, load, color=colors, label="weights (light: random)")
    ax.bar(xs, graphs, bottom=load, color="#ff7f0e", label="CUDA graphs")
    ax.bar(xs, rest, bottom=[w + g for w, g in zip(load, graphs, strict=True)], color="#cccccc",
           label="the rest to ready")
    ax.set_xlabel("trial (launch order)")
    ax.set_ylabel("seconds from launch")
    ax.set_title("time to ready per trial")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    save_png(fig, path)
    return True


def section(df: pd.DataFrame, out_dir: Folder) -> tuple[Table, list[str]]:
    """The report's time-to-ready table and campaign lines."""
    return table(df), campaign(out_dir, df).lines()
