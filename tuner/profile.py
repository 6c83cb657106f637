"""`servetune profile`: where the verify time goes, for the baseline and the chosen config.

Each configuration is launched fresh through its workload, the way a trial is but in this
process (no Ray): plan -> preflight -> GPUs clean -> start -> wait_ready -> warm-up -> one
measured round -> profile -> stop (always), with the marker env and its own folder
DIR/profile/<label>/. The workload profiles itself (``Running.profile``: SGLang's
``/start_profile``, or torch.profiler in each proxy rank) and ``launchers.trace`` reads the
traces back. Results, in DIR/profile/:
  profile.json    everything (``profile_summary`` gives the short form for reports)
  breakdown.txt   the table and, per configuration, "verify X ms = A ms communication + B ms
                  compute + C ms other"
  breakdown.png   stacked bars, the configurations side by side

``servetune run --profile`` calls ``after_run`` at the end of a run. This module imports
neither Ray nor pandas.
"""

from __future__ import annotations

import csv
import datetime
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchers import gpu, process, trace
from launchers.base import TrialContext, Workload
from launchers.failures import TrialFailed
from search_spaces.knobs import Value

if TYPE_CHECKING:
    from tuner.experiment import Setup

log = logging.getLogger(__name__)
Print = Callable[[str], None]

PROFILE_DIR = "profile"
PROFILE_JSON = "profile.json"
TABLE_TXT = "breakdown.txt"
PLOT_PNG = "breakdown.png"
DEFAULT_STEPS = 10
MEASURED = ("verify_ms", "allreduce_ms", "compute_ms", "draft_ms", "cycle_ms", "output_tok_s",
            "est_tok_s", "accept_length", "scaled")
COLORS = {"collective": "#d62728", "custom_allreduce": "#ff7f0e", "compute": "#1f77b4",
          "memcpy": "#9467bd", "gap": "#c7c7c7"}


@dataclass(frozen=True)
class Target:
    """One configuration to profile, under a label (its folder's name)."""

    label: str
    config: dict[str, Value]
    trial_id: str | None = None


@dataclass
class Launch:
    """Where and how the configurations run (what a trial gets from Ray, given here)."""

    out_dir: Path
    experiment: str  # the marker's experiment part
    gpu_ids: tuple[str, ...] = ()
    port: int | None = None  # None: the workload's own; 0: a free port
    seed: int = 0
    ready_timeout: float = 1800.0
    stop_grace: float = 10.0
    gpu_clean_timeout: float = 60.0
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- one configuration


def _resolve_port(port: int | None) -> int | None:
    return process.free_port() if port == 0 else port


def profile_config(workload: Workload, target: Target, launch: Launch, steps: int,
                   echo: Print) -> dict[str, Any]:
    """Launch ``target`` once, measure one round, profile ``steps`` steps, stop; the entry
    for profile.json. A failure is recorded in the entry, not raised."""
    folder = launch.out_dir / PROFILE_DIR / target.label
    folder.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {"label": target.label, "trial_id": target.trial_id,
                             "config": dict(target.config), "status": "failed",
                             "failure": None, "notes": [], "measured": {}, "traces": []}
    ctx = TrialContext(launch.experiment, f"profile-{target.label}", folder.absolute(),
                       launch.gpu_ids, _resolve_port(launch.port), launch.seed)
    echo(f"profile {target.label}: starting ({', '.join(_changed(target.config)) or 'no overrides'})")
    running = None
    before: list[gpu.GpuState] = []
    try:
        plan = workload.plan(target.config, ctx)
        (folder / "plan.json").write_text(json.dumps(plan.to_json(), indent=1, default=str))
        entry["notes"] += list(plan.notes)
        entry["notes"] += list(workload.preflight(plan, ctx) or [])
        if launch.gpu_ids:
            before = gpu.wait_clean(launch.gpu_ids, launch.gpu_clean_timeout)
        running = workload.start(plan, ctx)
        running.process.stop_grace = launch.stop_grace
        with running:
            running.wait_ready(launch.ready_timeout)
            running.warmup()
            measured = running.measure(0)
            files = running.profile(steps)
        entry["measured"] = {k: measured[k] for k in MEASURED if k in measured}
        result = trace.read(files)
        entry["traces"] = [os.path.relpath(f, launch.out_dir) for f in files]
        entry["device"] = result.device
        entry["skipped_steps"] = result.skipped_steps
        entry["breakdown"] = result.to_json()["summaries"]
        main = result.main("verify")
        entry["verify"] = main.to_json() if main is not None else None
        entry["sentence"] = main.sentence() if main is not None else None
        draft = result.main("draft")
        entry["draft"] = draft.to_json() if draft is not None else None
        if main is None:
            entry["failure"] = {"kind": "no_verify_steps", "message": "no verify step with "
                                f"work in the traces ({result.skipped_steps} spans without: "
                                "were the kernels traced?)"}
        else:
            entry["status"] = "ok"
        if measured.get("scaled"):
            entry["notes"].append("the proxy ran a subset of the layers: the profile covers "
                                  "the layers run, verify_ms is scaled to the whole model")
    except TrialFailed as err:
        entry["failure"] = err.failure.to_json()
    except NotImplementedError as err:
        entry["failure"] = {"kind": "not_supported", "message": str(err)}
    except trace.TraceError as err:
        entry["failure"] = {"kind": "unreadable_trace", "message": str(err)}
    finally:
        if running is not None:
            running.stop()
        process.reap_all(ctx.marker, grace=min(launch.stop_grace, 3.0), exact=True)
        if before:
            entry["notes"] += gpu.wait_memory_back(before, timeout=30.0)
    (folder / "entry.json").write_text(json.dumps(entry, indent=1, default=str))
    if entry["status"] == "ok":
        echo(f"profile {target.label}: {entry['sentence']}")
    else:
        failure = entry["failure"] or {}
        echo(f"profile {target.label}: failed ({failure.get('kind')}: "
             f"{str(failure.get('message', '')).splitlines()[0] if failure.get('message') else ''})")
    return entry


def _changed(config: Mapping[str, Value]) -> list[str]:
    return [f"{k}={v}" for k, v in config.items() if v is not None and v is not False]


# ---------------------------------------------------------------- several, and the outputs


def profile_configs(workload: Workload, targets: Sequence[Target], launch: Launch, *,
                    steps: int = DEFAULT_STEPS, echo: Print = print) -> dict[str, Any]:
    """Profile each target in turn; write profile.json, breakdown.txt and breakdown.png."""
    reaped = process.reap(f"{launch.experiment}/profile-")  # a killed earlier profile's
    if reaped:
        echo(f"reaped {len(reaped)} leftover processes of an earlier profile")
    entries = [profile_config(workload, t, launch, steps, echo) for t in targets]
    doc: dict[str, Any] = {
        "version": 1, "workload": workload.kind, "steps": steps,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu_ids": list(launch.gpu_ids), "notes": list(launch.notes), "entries": entries}
    folder = launch.out_dir / PROFILE_DIR
    doc["table"] = table_lines(doc)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TABLE_TXT).write_text("\n".join(doc["table"]) + "\n")
    try:
        doc["plot"] = PLOT_PNG if plot(doc, folder / PLOT_PNG) else None
    except Exception as err:  # matplotlib missing or failing must not lose the numbers
        log.warning("breakdown.png: %r", err)
        doc["plot"] = None
        doc["notes"].append(f"no plot: {err!r}")
    tmp = folder / (PROFILE_JSON + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(folder / PROFILE_JSON)
    echo("")
    for line in doc["table"]:
        echo(line)
    echo(f"profile: {folder / PROFILE_JSON}")
    return doc


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


# ---------------------------------------------------------------- an experiment


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def baseline_trial(out_dir: Path) -> str | None:
    """The baseline row of results.csv (the search's, where there are phases)."""
    try:
        with open(out_dir / "results.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row.get("baseline") == "True" and row.get("phase", "search") in ("", "search"):
                    return row.get("trial_id") or None
    except OSError:
        return None
    return None


def experiment_targets(setup: Setup, config: Mapping[str, Value] | None = None,
                       label: str | None = None, baseline: bool = True) -> list[Target]:
    """The baseline (unless told not to) and the given config, else the chosen one from
    best.json; a chosen config equal to the baseline is profiled once."""
    out = setup.spec.out_dir
    base = Target("baseline", setup.space.baseline(), baseline_trial(out))
    other: Target | None = None
    if config is not None:
        other = Target(label or "config", setup.space.complete(config))
    else:
        best = _read_json(out / "best.json")
        if best and isinstance(best.get("config"), dict):
            tid = best.get("trial_id")
            other = Target(label or "best", setup.space.complete(best["config"]),
                           str(tid) if tid else None)
    targets = [base] if baseline else []
    if other is not None and not (baseline and other.config == base.config):
        targets.append(other)
    return targets


def gpu_ids_for(setup: Setup) -> tuple[str, ...]:
    """The GPUs a trial of this experiment held: as many as run.json says (or the spec, or
    all), taken from CUDA_VISIBLE_DEVICES when it is set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([v.strip() for v in visible.split(",") if v.strip()] if visible is not None
           else [str(i) for i in range(gpu.device_count())])
    if (setup.spec.out_dir / "run.json").exists():
        want = setup.gpus_per_trial
    else:
        want = setup.spec.gpus_per_trial or len(ids)
    return tuple(ids[:want])


def profile_experiment(setup: Setup, targets: Sequence[Target] | None = None, *,
                       steps: int = DEFAULT_STEPS, echo: Print = print) -> dict[str, Any]:
    """Profile ``targets`` (default: the baseline and the chosen config) of an experiment."""
    spec = setup.spec
    targets = list(targets) if targets is not None else experiment_targets(setup)
    launch = Launch(
        out_dir=spec.out_dir, experiment=setup.marker_prefix.rstrip("/"),
        gpu_ids=gpu_ids_for(setup), port=getattr(spec.workload, "port", None),
        seed=spec.seed, ready_timeout=float(getattr(spec.workload, "ready_timeout", 1800.0)),
        stop_grace=spec.stop_grace, gpu_clean_timeout=spec.gpu_clean_timeout)
    return profile_configs(setup.workload, targets, launch, steps=steps, echo=echo)


def after_run(setup: Setup, *, interrupted: bool, echo: Print) -> None:
    """``servetune run --profile``: profile the baseline and the chosen config once the run
    is over (Ray is down, the GPUs are free). Never fails the run."""
    if not getattr(setup.spec, "profile", False) or interrupted:
        return
    try:
        profile_experiment(setup, echo=echo)
    except Exception as err:
        log.exception("profile after the run")
        echo(f"profile failed: {err!r}")


# ---------------------------------------------------------------- for reports


def profile_summary(folder: Path | str) -> dict[str, Any] | None:
    """The saved profile of an experiment folder in short form, or None when there is none.

    ``{"workload", "steps", "created", "plot" (absolute path of breakdown.png or None),
    "table" (the text lines), "entries": [{"label", "trial_id", "status", "failure_kind",
    "failure", "sentence", "step_ms", "communication_ms", "compute_ms", "other_ms",
    "collective_ms", "custom_allreduce_ms", "memcpy_ms", "gap_ms", "steps", "ranks",
    "batch_size", "measured_verify_ms", "device", "top_kernels", "notes"}]}``; numbers are
    ms per verify step (None for a failed entry)."""
    root = Path(folder) / PROFILE_DIR
    doc = _read_json(root / PROFILE_JSON)
    if doc is None:
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
