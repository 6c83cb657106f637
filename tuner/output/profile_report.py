"""The profile's outputs, from what ``servetune profile`` wrote (no launches, no Ray): the
breakdown table and sentences, the stacked-bar plot, and the short form for reports."""

from __future__ import annotations

from pathlib import Path

from launchers import trace
from tuner.record.files import PROFILE_DIR, PROFILE_JSON
from tuner.record.profile import ProfileRecord, ProfileSummary, SummaryEntry, read_profile

__all__ = ["PLOT_PNG", "PROFILE_DIR", "PROFILE_JSON", "TABLE_TXT", "plot", "profile_summary",
           "table_lines"]

TABLE_TXT = "breakdown.txt"
PLOT_PNG = "breakdown.png"
COLORS = {"collective": "#d62728", "custom_allreduce": "#ff7f0e", "compute": "#1f77b4",
          "memcpy": "#9467bd", "gap": "#c7c7c7"}


def table_lines(doc: ProfileRecord) -> list[str]:
    """The breakdown table (ms per verify step, mean over steps and ranks) and the
    sentences."""
    cols = [("step", None), ("gloo" if doc.on_cpu else "NCCL", "collective"),
            ("custom AR", "custom_allreduce"), ("compute", "compute"), ("memcpy", "memcpy"),
            ("gaps", "gap"), ("comm", None), ("other", None), ("measured", None)]
    entries = doc.entries
    width = max([len(e.name) for e in entries] + [14])
    lines = [f"verify step breakdown ({doc.workload}, ms per step: mean of "
             f"{doc.steps} profiled steps per rank, then over ranks; 'measured' is the "
             "workload's own verify_ms)",
             f"{'config':<{width}} " + " ".join(f"{c:>9}" for c, _ in cols)]
    sentences = []
    for e in entries:
        v = e.verify
        if e.status != "ok" or v is None:
            lines.append(f"{e.name:<{width}} failed: {e.failure.kind if e.failure else None}")
            continue
        values = [v.step_ms, *(v.split(k) for _, k in cols[1:6] if k),
                  v.communication_ms, v.other_ms, e.measured_ms("verify_ms")]
        lines.append(f"{e.name:<{width}} " + " ".join(
            f"{x:>9.3f}" if isinstance(x, (int, float)) else f"{'-':>9}" for x in values))
        bs = f", batch {v.batch_size}" if v.batch_size else ""
        sentences.append(f"{e.label}: {v.sentence} ({v.steps} steps x {v.ranks} rank(s){bs})")
        if e.draft is not None:
            sentences.append(f"{e.label}: {e.draft.sentence} per draft step")
        profiled = e.profiled_exposed_ms
        if profiled is not None:
            exposed = e.measured_ms("exposed_comm_ms")
            against = f" (measured without the profiler: {exposed:.3f} ms)" \
                if exposed is not None else ""
            sentences.append(f"{e.label}: exposed communication {profiled:.3f} ms = verify "
                             f"step - compute-only step, under the profiler{against}")
    notes = sorted({n for e in entries for n in e.notes if "profile" in n})
    return lines + [""] + sentences + [f"note: {n}" for n in notes]


def plot(doc: ProfileRecord, path: Path) -> bool:
    """Stacked bars of the verify step, one per profiled configuration (matplotlib, Agg)."""
    from matplotlib.figure import Figure

    from tuner.output.plots import save_png

    ok = [e.verify for e in doc.entries if e.status == "ok" and e.verify is not None]
    names = [e.name for e in doc.entries if e.status == "ok" and e.verify is not None]
    if not ok:
        return False
    fig = Figure(figsize=(2.2 + 1.6 * len(ok), 4.2))
    ax = fig.add_subplot()
    x = list(range(len(ok)))
    bottom = [0.0] * len(ok)
    for cls in trace.CLASSES:
        heights = [v.split(cls) for v in ok]
        if not any(heights):
            continue
        label = "gloo collectives (CPU)" if cls == "collective" and doc.on_cpu \
            else trace.LABELS[cls]
        ax.bar(x, heights, 0.55, bottom=bottom, color=COLORS[cls], label=label)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for i, v in enumerate(ok):
        ax.text(i, bottom[i], f"{v.step_ms:.2f} ms\n({v.communication_ms:.2f} comm)",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("ms per verify step")
    ax.set_ylim(0, max(bottom) * 1.25 or 1.0)
    ax.set_title(f"where the verify time goes ({doc.workload})", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save_png(fig, path)
    return True


def profile_summary(folder: Path | str) -> ProfileSummary | None:
    """The saved profile of an experiment folder in short form (``ProfileSummary``: the
    entries' numbers are ms per verify step, None for a failed entry), or None when there
    is none."""
    doc = read_profile(Path(folder))
    if doc is None:
        return None
    png = Path(folder) / PROFILE_DIR / PLOT_PNG
    return ProfileSummary(workload=doc.workload, steps=doc.steps, created=doc.created,
                          plot=str(png.absolute()) if png.exists() else None, table=doc.table,
                          entries=[SummaryEntry.of(e) for e in doc.entries])
