"""Assembles and runs an experiment: whole-node trials, scheduler, searcher stack, baseline
first, storage, resume, and the end-of-run results."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launchers import gpu, process
from launchers.base import TrialContext, Workload
from search_spaces import knobs
from search_spaces.space import SearchSpace, SpaceError, load
from tuner.results import Objective, write_json
from tuner.spec import ExperimentSpec, SpecError

log = logging.getLogger(__name__)
RUN_INFO = "run.json"
Print = Callable[[str], None]


def build_workload(spec: ExperimentSpec) -> Workload:
    """Map the args' ``kind`` to its workload class (strings become classes only here)."""
    args = spec.workload
    if args.kind == "sglang":
        from launchers.sglang.launcher import SGLangWorkload

        return SGLangWorkload(args)
    from launchers.proxy.launcher import ProxyWorkload

    return ProxyWorkload(args)


@dataclass
class Setup:
    """Everything derived from the spec without starting anything."""

    spec: ExperimentSpec
    workload: Workload
    space: SearchSpace
    objective: Objective
    dropped: list[str] = field(default_factory=list)
    gpus_per_trial: int = 0  # known once Ray is up (run.json keeps it)

    @property
    def marker_prefix(self) -> str:
        return f"{self.spec.marker_id}/"


def prepare(spec: ExperimentSpec) -> Setup:
    """Load and check the space for this workload; raises SpecError/SpaceError on bad input."""
    workload = build_workload(spec)
    space = load(spec.space).with_pins(spec.pins)
    supported = {n for n, k in knobs.CATALOGUE.items() if workload.supports(k)}
    space, dropped = space.restricted_to(frozenset(supported))
    if not space.domains:
        raise SpaceError(f"{spec.space}: the space is empty for the {workload.kind} workload "
                         f"(it does not model: {', '.join(dropped)})")
    metric = spec.metric or workload.default_metric
    mode = spec.mode or workload.default_mode
    setup = Setup(spec, workload, space, Objective(metric, mode, spec.rounds), dropped)
    with contextlib.suppress(OSError, ValueError):
        setup.gpus_per_trial = int(json.loads((spec.out_dir / RUN_INFO).read_text())
                                   ["gpus_per_trial"])
    return setup


# ---------------------------------------------------------------- the Ray trial


def servetune_trial(config: dict[str, Any], spec_json: str) -> None:
    """The Ray Tune trainable (its name is what the dashboard shows for trial actors)."""
    import ray
    from ray import tune

    from tuner.trial import resolve_port, run_trial

    spec = ExperimentSpec.model_validate_json(spec_json)
    setup = prepare(spec)
    context = tune.get_context()
    trial_id = context.get_trial_id()
    assert trial_id is not None
    port = resolve_port(getattr(spec.workload, "port", None))
    # Artifacts go straight into the experiment folder (Ray's own trial folder has the same
    # name): Ray's working dir is a staging copy that is synced late or not at all.
    trial_dir = spec.out_dir.resolve() / trial_id
    ctx = TrialContext(spec.marker_id, trial_id, trial_dir,
                       tuple(str(g) for g in ray.get_gpu_ids()), port, spec.seed)
    ready_timeout = float(getattr(spec.workload, "ready_timeout", 1800.0))
    node_id = ray.get_runtime_context().get_node_id()

    def report(metrics: dict[str, Any]) -> None:
        # Which node ran the trial (nodes of one host share an IP): a column of results.csv.
        tune.report({**metrics, "node_id": node_id})

    guard = ExitGuard(ctx.marker, spec.stop_grace)
    atexit.register(guard)
    try:
        run_trial(config, space=setup.space, workload=setup.workload, ctx=ctx,
                  rounds=spec.rounds, report=report, stop_grace=spec.stop_grace,
                  gpu_clean_timeout=spec.gpu_clean_timeout, ready_timeout=ready_timeout,
                  experiment_prefix=setup.marker_prefix, stopping=guard.stopping)
    finally:
        guard.done.set()
        atexit.unregister(guard)


class ExitGuard:
    """Ray ends a stopped trial's worker process without waiting for the trial's own
    ``finally`` (its cleanup does not wait for the training thread), and then kills the
    worker's children. Python still runs atexit handlers on that exit: this one stops the
    trial's server tree by its marker (setsid grandchildren too) and gives the trial a few
    seconds to record itself, so a stopped trial leaves its folder complete and its node
    free before the next trial starts there."""

    def __init__(self, marker: str, grace: float) -> None:
        self.marker = marker
        self.grace = grace
        self.stopping = threading.Event()
        self.done = threading.Event()

    def __call__(self) -> None:
        if self.done.is_set():
            return
        self.stopping.set()
        process.reap_all(self.marker, grace=self.grace, exact=True)
        self.done.wait(timeout=self.grace + 5.0)


# ---------------------------------------------------------------- Ray


@dataclass
class Cluster:
    nodes: int
    gpus_per_node: list[int]
    dashboard_url: str | None
    started_here: bool


def check_address(address: str, timeout: float = 3.0) -> None:
    """An unreachable --address is bad input: fail before connecting (Ray would wait)."""
    import socket

    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise SpecError(f"--address {address!r}: expected HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise SpecError(f"--address {address}: unreachable ({err.strerror or err})") from None


@contextlib.contextmanager
def ray_cluster(spec: ExperimentSpec, marker_prefix: str) -> Iterator[Cluster]:
    """Connect to --address or start a local Ray (dashboard on 127.0.0.1, token auth on).
    Ray processes started here carry the experiment's marker so that a crashed run's
    leftovers can be reaped by the next ``--resume``."""
    import ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our own progress lines
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
    # A failed trial is data: its kind and message get one progress line, the traceback
    # stays in its folder (error.txt, failure.json) instead of filling the terminal.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    # A reused trial actor waits this long for the previous trial's teardown (default 2 s).
    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", str(int(spec.stop_grace) + 5))
    started_here = spec.address is None
    saved = {k: os.environ.get(k) for k in (process.MARKER_ENV, process.OWNER_ENV)}
    try:
        if started_here:
            os.environ[process.MARKER_ENV] = f"{marker_prefix}ray"
            os.environ[process.OWNER_ENV] = str(os.getpid())
            info = ray.init(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus,
                            include_dashboard=spec.dashboard, dashboard_host="127.0.0.1",
                            log_to_driver=False, logging_level=logging.WARNING)
        else:
            assert spec.address is not None
            check_address(spec.address)
            info = ray.init(address=spec.address, log_to_driver=False,
                            logging_level=logging.WARNING)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in alive]
        url = getattr(info, "dashboard_url", None) or None
        yield Cluster(len(alive), gpus, f"http://{url}" if url else None, started_here)
    finally:
        ray.shutdown()
        # Servers this experiment left on this host (the marker names this experiment's
        # folder, so with --address nothing of other drivers is touched).
        process.reap_all(marker_prefix)


def gpus_per_trial(spec: ExperimentSpec, cluster: Cluster) -> int:
    """All GPUs of a node (the smallest node with GPUs), or --gpus-per-trial."""
    with_gpus = [g for g in cluster.gpus_per_node if g > 0]
    if spec.gpus_per_trial is not None:
        if not with_gpus or spec.gpus_per_trial > max(with_gpus):
            raise SpecError(f"--gpus-per-trial {spec.gpus_per_trial}: no node has that many "
                            f"GPUs (nodes: {cluster.gpus_per_node})")
        return spec.gpus_per_trial
    return min(with_gpus) if with_gpus else 0


def local_gpu_count(spec: ExperimentSpec) -> int | None:
    """GPUs a local run will see, known before Ray starts (None with --address)."""
    if spec.address is not None:
        return None
    if spec.num_gpus is not None:
        return spec.num_gpus
    return gpu.device_count()


def workload_notes(setup: Setup) -> tuple[str, ...]:
    """What the workload says about itself on this machine (e.g. the proxy on CPU: NCCL knobs
    have no effect), read from the baseline's plan."""
    gpus = tuple(str(i) for i in range(setup.gpus_per_trial))
    port = getattr(setup.spec.workload, "port", None) or 30000  # --port 0: any port will do
    ctx = TrialContext(setup.spec.name, "notes", setup.spec.out_dir / "notes", gpus, port,
                       setup.spec.seed)
    return setup.workload.plan(setup.space.baseline(), ctx).notes


@contextlib.contextmanager
def interrupt_watch() -> Iterator[Callable[[], bool]]:
    """Yields a check: did Ray Tune's fit() catch a Ctrl-C? Tune swaps its own SIGINT
    handler in and puts the previous one back on the first signal, so this sentinel being
    back in place after fit() means fit() was interrupted. SIGTERM (``kill``, ``timeout``, a
    batch scheduler) is turned into that same graceful stop instead of killing the driver
    with Ray and its servers still running."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def sentinel(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def term_as_int(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, sentinel)
    previous_term = signal.signal(signal.SIGTERM, term_as_int)
    try:
        yield lambda: signal.getsignal(signal.SIGINT) is sentinel
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


def stdout_print(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


# ---------------------------------------------------------------- the run


@dataclass
class RunOutcome:
    out_dir: Path
    table: Any  # pandas.DataFrame
    best: dict[str, Any] | None
    interrupted: bool
    lines: list[str]


def _trial_dirname(trial: Any) -> str:
    return str(trial.trial_id)


def run(spec: ExperimentSpec, *, resume: bool = False, echo: Print = stdout_print) -> RunOutcome:
    """Run (or resume) an experiment to the end and write its results into spec.out_dir."""
    from ray import tune

    from tuner import confirm, finish
    from tuner.dashboard import login_lines, named_trainable, reuse_actors
    from tuner.progress import TrialLines
    from tuner.recorder import Recorder
    from tuner.search import build_scheduler, build_search

    setup = prepare(spec)
    out_dir = spec.out_dir.resolve()
    spec.save()
    if setup.dropped:
        echo(f"not modelled by the {setup.workload.kind} workload, left at default: "
             f"{', '.join(setup.dropped)}")
    # Leftovers of a killed earlier run of this experiment (their owners are dead).
    reaped = process.reap(setup.marker_prefix)
    if reaped:
        echo(f"reaped {len(reaped)} leftover processes of an earlier run of {spec.name}")
    with ray_cluster(spec, setup.marker_prefix) as cluster:
        gpus = gpus_per_trial(spec, cluster)
        slots = sum(1 for g in cluster.gpus_per_node if gpus and g >= gpus) if gpus else 1
        resources: dict[str, float] = {"cpu": 1, "gpu": gpus} if gpus else {"cpu": 1}
        setup.gpus_per_trial = gpus
        write_json(out_dir / RUN_INFO, {"nodes": cluster.nodes, "gpus_per_node":
                                        cluster.gpus_per_node, "gpus_per_trial": gpus,
                                        "dashboard_url": cluster.dashboard_url})
        echo(f"{cluster.nodes} node(s), GPUs per node {cluster.gpus_per_node}; each trial holds "
             f"{gpus or 'no'} GPU(s); at most {max(slots, 1)} trial(s) at once")
        if cluster.dashboard_url:
            for line in login_lines(cluster.dashboard_url):
                echo(line)
        echo(f"TensorBoard: tensorboard --logdir {out_dir}")
        for note in workload_notes(setup):
            echo(note)
        stack = build_search(setup.space, setup.objective, search=spec.search,
                             stage_search=spec.stage_search, samples=spec.samples,
                             seed=spec.seed, failure_aware=spec.failure_aware,
                             max_concurrent=max(slots, 1), out_dir=out_dir,
                             points=spec.points or None)
        for note in stack.notes:
            echo(note)

        def make_trainable(run_spec: ExperimentSpec) -> type:
            # Actors the dashboard lists as servetune_trial, repr "<experiment>/<trial id>".
            return named_trainable(servetune_trial, resources, spec.name,
                                   spec_json=run_spec.model_dump_json())

        trainable = make_trainable(spec)
        recorder = Recorder(out_dir, lambda: finish.write_table(setup, running=True),
                            stack.filtering.record_outcome, stack.stage_of)
        reporter = TrialLines(setup.objective.metric, list(setup.space.domains), spec.rounds,
                              stage_of=stack.stage_of)
        tune_config = tune.TuneConfig(
            metric=setup.objective.metric, mode=setup.objective.mode,
            num_samples=stack.num_samples, search_alg=stack.search_alg,
            scheduler=build_scheduler(spec.scheduler, setup.objective),
            reuse_actors=reuse_actors(spec.reuse_actors, spec.dashboard),
            trial_dirname_creator=_trial_dirname)
        run_config = tune.RunConfig(
            name=out_dir.name, storage_path=str(out_dir.parent), callbacks=[recorder],
            progress_reporter=reporter, verbose=1,
            failure_config=tune.FailureConfig(max_failures=0))
        if resume:
            tuner = tune.Tuner.restore(str(out_dir), trainable=trainable,
                                       resume_unfinished=True, resume_errored=False)
            # Fresh callbacks and searcher built from the spec replace the pickled ones;
            # the searcher's own state is then restored from the experiment folder.
            internal = tuner._local_tuner
            assert internal is not None
            internal._tune_config = tune_config
            internal._run_config.callbacks = [recorder]
            internal._run_config.progress_reporter = reporter
        else:
            tuner = tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)
        with interrupt_watch() as was_interrupted:
            grid = tuner.fit()
            caught = was_interrupted()
        statuses = [t.status for t in grid._experiment_analysis.trials]
        # Tune marks in-flight trials TERMINATED when it cleans up after a Ctrl-C, so the
        # statuses alone do not tell an interrupted run from a finished one.
        interrupted = caught or any(s not in ("TERMINATED", "ERROR") for s in statuses)
        confirmed = None
        if not interrupted:  # the confirm stage and the speculative reference (tuner/confirm.py)
            confirmed = confirm.run_stage(setup, make_trainable, echo=echo)
            interrupted = bool(confirmed.get("interrupted"))
    return finish.finish(setup, stack, interrupted=interrupted, echo=echo,
                         confirm_data=confirmed)
