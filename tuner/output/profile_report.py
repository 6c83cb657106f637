"""The profile's outputs, from what ``servetune profile`` wrote (no launches, no Ray): the
breakdown table and sentences, the stacked-bar plot, and the short form for reports."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launchers import trace
from tuner.output.files import read_json

PROFILE_DIR = "profile"
PROFILE_JSON = "profile.json"
TABLE_TXT = "breakdown.txt"
PLOT_PNG = "breakdown.png"
COLORS = {"collective": "#d62728", "custom_allreduce": "#ff7f0e", "compute": "#1f77b4",
          "memcpy": "#9467bd", "gap": "#c7c7c7"}


def _on_cpu(doc: Mapping[str, Any]) -> bool:
    return any(e.get("device") == "cpu" for e in doc.get("entries", []))


def _label(entry: Mapping[str, Any]) -> str:
    tid = entry.get("trial_id")
    return f"{entry['label']} ({tid})" if tid else str(entry["label"])


def table_lines(doc: Mapping[str, Any]) -> list[str]:
    """The breakdown table (ms per verify step, mean over steps and ranks) and the
    sentences."""
    cols = [("step", None), ("gloo" if _on_cpu(doc) else "NCCL", "collective"),
            ("custom AR", "custom_allreduce"), ("compute", "compute"), ("memcpy", "memcpy"),
            ("gaps", "gap"), ("comm", None), ("other", None), ("measured", None)]
    entries = list(doc.get("entries", []))
    width = max([len(_label(e)) for e in entries] + [14])
    lines = [f"verify step breakdown ({doc.get('workload')}, ms per step: mean of "
             f"{doc.get('steps')} profiled steps per rank, then over ranks; 'measured' is the "
             "workload's own verify_ms)",
             f"{'config':<{width}} " + " ".join(f"{c:>9}" for c, _ in cols)]
    sentences = []
    for e in entries:
        v = e.get("verify")
        if e.get("status") != "ok" or not v:
            failure = e.get("failure") or {}
            lines.append(f"{_label(e):<{width}} failed: {failure.get('kind')}")
            continue
        split = v["split_ms"]
        measured = e.get("measured", {}).get("verify_ms")
        values = [v["step_ms"], *(split[k] for _, k in cols[1:6] if k),
                  v["communication_ms"], v["other_ms"], measured]
        lines.append(f"{_label(e):<{width}} " + " ".join(
            f"{x:>9.3f}" if isinstance(x, (int, float)) else f"{'-':>9}" for x in values))
        bs = f", batch {v['batch_size']}" if v.get("batch_size") else ""
        sentences.append(f"{e['label']}: {v['sentence']} ({v['steps']} steps x "
                         f"{v['ranks']} rank(s){bs})")
        draft = e.get("draft")
        if draft:
            sentences.append(f"{e['label']}: {draft['sentence']} per draft step")
        profiled = e.get("profiled_exposed_ms")
        if isinstance(profiled, (int, float)):
            exposed = e.get("measured", {}).get("exposed_comm_ms")
            against = f" (measured without the profiler: {exposed:.3f} ms)" \
                if isinstance(exposed, (int, float)) else ""
            sentences.append(f"{e['label']}: exposed communication {profiled:.3f} ms = verify "
                             f"step - compute-only step, under the profiler{against}")
    notes = sorted({n for e in entries for n in e.get("notes", []) if "profile" in n})
    return lines + [""] + sentences + [f"note: {n}" for n in notes]


def plot(doc: Mapping[str, Any], path: Path) -> bool:
    """Stacked bars of the verify step, one per profiled configuration (matplotlib, Agg)."""
    from matplotlib.figure import Figure

    ok = [e for e in doc.get("entries", []) if e.get("status") == "ok" and e.get("verify")]
    if not ok:
        return False
    fig = Figure(figsize=(2.2 + 1.6 * len(ok), 4.2))
    ax = fig.add_subplot()
    x = list(range(len(ok)))
    bottom = [0.0] * len(ok)
    for cls in trace.CLASSES:
        heights = [float(e["verify"]["split_ms"][cls]) for e in ok]
        if not any(heights):
            continue
        label = "gloo collectives (CPU)" if cls == "collective" and _on_cpu(doc) \
            else trace.LABELS[cls]
        ax.bar(x, heights, 0.55, bottom=bottom, color=COLORS[cls], label=label)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for i, e in enumerate(ok):
        v = e["verify"]
        ax.text(i, bottom[i], f"{v['step_ms']:.2f} ms\n({v['communication_ms']:.2f} comm)",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [_label(e) for e in ok], fontsize=8)
    ax.set_ylabel("ms per verify step")
    ax.set_ylim(0, max(bottom) * 1.25 or 1.0)
    ax.set_title(f"where the verify time goes ({doc.get('workload')})", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", facecolor="white")
    return True


def profile_summary(folder: Path | str) -> dict[str, Any] | None:
    """The saved profile of an experiment folder in short form, or None when there is none.

    ``{"workload", "steps", "created", "plot" (absolute path of breakdown.png or None),
    "table" (the text lines), "entries": [{"label", "trial_id", "status", "failure_kind",
    "failure", "sentence", "step_ms", "communication_ms", "compute_ms", "other_ms",
    "collective_ms", "custom_allreduce_ms", "memcpy_ms", "gap_ms", "steps", "ranks",
    "batch_size", "measured_verify_ms", "device", "top_kernels", "notes"}]}``; numbers are
    ms per verify step (None for a failed entry)."""
    root = Path(folder) / PROFILE_DIR
    doc = read_json(root / PROFILE_JSON)
    if not isinstance(doc, dict):
        return None
    entries = []
    for e in doc.get("entries", []):
        v = e.get("verify") or {}
        split = v.get("split_ms") or {}
        failure = e.get("failure") or {}
        entries.append({
            "label": e.get("label"), "trial_id": e.get("trial_id"), "status": e.get("status"),
            "failure_kind": failure.get("kind"), "failure": failure.get("message"),
            "sentence": e.get("sentence"), "step_ms": v.get("step_ms"),
            "communication_ms": v.get("communication_ms"), "compute_ms": v.get("compute_ms"),
            "other_ms": v.get("other_ms"),
            **{f"{c}_ms": split.get(c) for c in trace.CLASSES if c != "compute"},
            "steps": v.get("steps"), "ranks": v.get("ranks"), "batch_size": v.get("batch_size"),
            "measured_verify_ms": (e.get("measured") or {}).get("verify_ms"),
            "device": e.get("device"), "top_kernels": v.get("top_kernels", []),
            "notes": e.get("notes", [])})
    png = root / PLOT_PNG
    return {"workload": doc.get("workload"), "steps": doc.get("steps"),
            "created": doc.get("created"), "plot": str(png.absolute()) if png.exists() else None,
            "table": doc.get("table", []), "entries": entries}
