"""`servetune profile`: where the verify time goes, for the baseline and the chosen config.

Each configuration is launched fresh through the trial lifecycle (``tuner.run.lifecycle``)
in this process (no Ray): plan -> preflight -> GPUs clean -> start -> ready -> warm-up -> one
measured round -> profile -> stop (always), with the marker env and its own folder
DIR/profile/<label>/. The workload profiles itself (``Running.profile``: SGLang's
``/start_profile``, or torch.profiler in each proxy rank) and ``launchers.trace`` reads the
traces back. ``tuner.output.profile_report`` writes profile.json, breakdown.txt and
breakdown.png. ``servetune run --profile`` calls ``after_run`` at the end of a run.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launchers import gpu, process, trace
from launchers.base import TrialContext, Workload
from launchers.failures import TrialFailed
from search_spaces.knobs import Value, without_weights
from tuner.output.profile_report import PLOT_PNG, TABLE_TXT, plot, table_lines
from tuner.record.files import BEST_JSON, PROFILE_JSON, RESULTS_CSV, RUN_JSON
from tuner.record.info import BestRecord, read_record
from tuner.record.profile import ProfileEntry, ProfileRecord, profile_dir, write_entry, write_profile
from tuner.record.rows import read_csv
from tuner.run.lifecycle import Launch, Limits
from tuner.setup import Print, Setup
from tuner.weights import CONFIRM

log = logging.getLogger(__name__)

DEFAULT_STEPS = 10
MEASURED = ("verify_ms", "compute_ms", "exposed_comm_ms", "comm_alone_ms", "draft_ms",
            "cycle_ms", "output_throughput", "est_tok_s", "accept_length", "scaled")


@dataclass(frozen=True)
class Target:
    """One configuration to profile, under a label (its folder's name)."""

    label: str
    config: dict[str, Value]
    trial_id: str | None = None


@dataclass
class Where:
    """Where and how the configurations run (what a trial gets from Ray, given here)."""

    out_dir: Path
    experiment: str  # the marker's experiment part
    gpu_ids: tuple[str, ...] = ()
    port: int | None = None  # None: the workload's own; 0: a free port
    seed: int = 0
    limits: Limits = field(default_factory=Limits)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- one configuration


def _resolve_port(port: int | None) -> int | None:
    return process.free_port() if port == 0 else port


def profile_config(workload: Workload, target: Target, where: Where, steps: int,
                   echo: Print) -> ProfileEntry:
    """Launch ``target`` once, measure one round, profile ``steps`` steps, stop; the entry
    for profile.json. A failure is recorded in the entry, not raised."""
    folder = profile_dir(where.out_dir) / target.label
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {}  # what the launch and the traces gave
    failure: dict[str, Any] | None = None
    notes: list[str] = []
    ctx = TrialContext(where.experiment, f"profile-{target.label}", folder.absolute(),
                       where.gpu_ids, _resolve_port(where.port), where.seed)
    echo(f"profile {target.label}: starting ({', '.join(_changed(target.config)) or 'no overrides'})")
    launch = Launch(workload, target.config, ctx, where.limits)
    try:
        with launch as running:
            measured = running.measure(0)
            files = running.profile(steps)
        found["measured"] = {k: measured[k] for k in MEASURED if k in measured}
        result = trace.read(files, workload.step_spans)
        main, draft = result.main("verify"), result.main("draft")
        compute = result.main("compute_only")  # the proxy: the pass with its collectives no-ops
        found.update(
            traces=[os.path.relpath(f, where.out_dir) for f in files], device=result.device,
            skipped_steps=result.skipped_steps, breakdown=result.to_json()["summaries"],
            verify=main.to_json() if main is not None else None,
            sentence=main.sentence() if main is not None else None,
            draft=draft.to_json() if draft is not None else None)
        if main is not None and compute is not None:
            found["profiled_exposed_ms"] = main.step_ms - compute.step_ms
        if main is None:
            failure = {"kind": "no_verify_steps", "message": "no verify step with "
                       f"work in the traces ({result.skipped_steps} spans without: "
                       "were the kernels traced?)"}
        else:
            found["status"] = "ok"
        if measured.get("scaled"):
            notes.append("the proxy ran a subset of the layers: the profile covers "
                         "the layers run, verify_ms is scaled to the whole model")
    except TrialFailed as err:
        failure = err.failure.to_json()
    except NotImplementedError as err:
        failure = {"kind": "not_supported", "message": str(err)}
    except trace.TraceError as err:
        failure = {"kind": "unreadable_trace", "message": str(err)}
    finally:
        launch.teardown()
        notes = [*(launch.plan.notes if launch.plan else ()), *launch.warnings, *notes]
    entry = ProfileEntry(label=target.label, trial_id=target.trial_id, config=dict(target.config),
                         status=found.pop("status", "failed"), failure=failure, notes=notes,
                         **found)
    write_entry(folder, entry)
    if entry.status == "ok":
        echo(f"profile {target.label}: {entry.sentence}")
    else:
        kind, message = (entry.failure.kind, entry.failure.message) if entry.failure \
            else (None, "")
        echo(f"profile {target.label}: failed ({kind}: "
             f"{message.splitlines()[0] if message else ''})")
    return entry


def _changed(config: Mapping[str, Value]) -> list[str]:
    return [f"{k}={v}" for k, v in config.items() if v is not None and v is not False]


# ---------------------------------------------------------------- several, and the outputs


def profile_configs(workload: Workload, targets: Sequence[Target], where: Where, *,
                    steps: int = DEFAULT_STEPS, echo: Print = print) -> ProfileRecord:
    """Profile each target in turn; write profile.json, breakdown.txt and breakdown.png."""
    reaped = process.reap(f"{where.experiment}/profile-")  # a killed earlier profile's
    if reaped:
        echo(f"reaped {len(reaped)} leftover processes of an earlier profile")
    entries = [profile_config(workload, t, where, steps, echo) for t in targets]
    doc = ProfileRecord(
        version=1, workload=workload.kind, steps=steps,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu_ids=list(where.gpu_ids), notes=list(where.notes), entries=entries)
    folder = profile_dir(where.out_dir)
    table = table_lines(doc)
    notes = list(doc.notes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TABLE_TXT).write_text("\n".join(table) + "\n")
    try:
        drawn = PLOT_PNG if plot(doc, folder / PLOT_PNG) else None
    except Exception as err:  # matplotlib missing or failing must not lose the numbers
        log.warning("breakdown.png: %r", err)
        drawn = None
        notes.append(f"no plot: {err!r}")
    doc = doc.model_copy(update={"table": table, "plot": drawn, "notes": notes})
    write_profile(where.out_dir, doc)
    echo("")
    for line in table:
        echo(line)
    echo(f"profile: {folder / PROFILE_JSON}")
    return doc


# ---------------------------------------------------------------- an experiment


def baseline_trial(out_dir: Path) -> str | None:
    """The baseline row of results.csv (the search's, where there are phases)."""
    return next((r.trial_id for r in read_csv(out_dir / RESULTS_CSV)
                 if r.baseline and r.search and r.trial_id), None)


def experiment_targets(setup: Setup, config: Mapping[str, Value] | None = None,
                       label: str | None = None, baseline: bool = True) -> list[Target]:
    """The baseline (unless told not to) and the given config, else the chosen one from
    best.json; a chosen config equal to the baseline is profiled once. Each loads the weights
    the experiment decided on (its confirm stage's: random ones only with ``--weights
    dummy``, where the checkpoint may have none)."""
    out = setup.spec.out_dir
    weights = setup.weights.pins(CONFIRM)

    def complete(config: Mapping[str, Value]) -> dict[str, Value]:
        return {**setup.space.complete(without_weights(config)), **weights}

    base = Target("baseline", complete(setup.space.baseline()), baseline_trial(out))
    other: Target | None = None
    if config is not None:
        other = Target(label or "config", complete(config))
    else:
        best = read_record(out / BEST_JSON, BestRecord)
        if best is not None and "config" in best.model_fields_set:
            other = Target(label or "best", complete(best.config), best.trial_id or None)
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
    if (setup.spec.out_dir / RUN_JSON).exists():
        want = setup.gpus_per_trial
    else:
        want = setup.spec.gpus_per_trial or len(ids)
    return tuple(ids[:want])


def profile_experiment(setup: Setup, targets: Sequence[Target] | None = None, *,
                       steps: int = DEFAULT_STEPS, echo: Print = print) -> ProfileRecord:
    """Profile ``targets`` (default: the baseline and the chosen config) of an experiment."""
    spec = setup.spec
    targets = list(targets) if targets is not None else experiment_targets(setup)
    where = Where(out_dir=spec.out_dir, experiment=setup.marker_prefix.rstrip("/"),
                  gpu_ids=gpu_ids_for(setup), port=spec.workload.port, seed=spec.seed,
                  limits=limits_of(setup))
    return profile_configs(setup.workload, targets, where, steps=steps, echo=echo)


def limits_of(setup: Setup) -> Limits:
    spec = setup.spec
    return Limits(spec.workload.ready_timeout, spec.stop_grace, spec.gpu_clean_timeout)


def after_run(setup: Setup, *, interrupted: bool, echo: Print) -> None:
    """``servetune run --profile``: profile the baseline and the chosen config once the run
    is over (Ray is down, the GPUs are free). Never fails the run."""
    if not setup.spec.profile or interrupted:
        return
    try:
        profile_experiment(setup, echo=echo)
    except Exception as err:
        log.exception("profile after the run")
        echo(f"profile failed: {err!r}")


