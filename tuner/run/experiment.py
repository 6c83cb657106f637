"""Runs (or resumes) an experiment: whole-node trials on Ray, the searcher stack with the
baseline first, early stopping, then the confirm stage and the end-of-run outputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launchers import process
from tuner.output import broken
from tuner.output.results import write_table
from tuner.record.files import INPUTS_JSON, RUN_JSON
from tuner.record.info import InputsRecord, RunInfo, write_record
from tuner.record.rows import TRIAL_ID
from tuner.record.spec_file import save_spec
from tuner.run import confirm, finish
from tuner.run.cluster import gpus_per_trial as node_gpus_per_trial
from tuner.run.cluster import ray_cluster, trial_slots
from tuner.run.dashboard import login_lines, reuse_actors
from tuner.run.environment import EnvironmentWatch
from tuner.run.finish import RunOutcome
from tuner.run.fit import FitPlan, fit
from tuner.run.progress import TrialLines
from tuner.run.recorder import Recorder
from tuner.run.replay import replay, search_state
from tuner.run.stopping import stop_on_signals
from tuner.run.trackers import tracker_callbacks
from tuner.run.trainable import make_trainable
from tuner.search.build import Study, build_scheduler, build_search
from tuner.search.keys import Resolved
from tuner.search.study import study_name
from tuner.setup import Print, Setup, prepare, stdout_print
from tuner.spec import ExperimentSpec


def run(spec: ExperimentSpec, *, resume: bool = False, echo: Print = stdout_print) -> RunOutcome:
    """Run (or resume) an experiment to the end and write its results into spec.out_dir;
    SIGINT/SIGTERM stop it at once (``tuner.run.stopping``)."""
    setup = prepare(spec)
    out_dir = spec.out_dir.resolve()

    def save() -> dict[str, str]:
        table = write_table(out_dir, setup.objective, setup.space.baseline())
        return {} if table.empty else dict(zip(table[TRIAL_ID], table["status"], strict=True))

    with stop_on_signals(setup.marker_prefix, out_dir, save, echo) as arm:
        return _run(setup, spec, out_dir, resume=resume, echo=echo, arm=arm)


def resolved_knobs(setup: Setup) -> Resolved:
    """What the workload resolves a configuration to, as knob values, asked on the driver as
    its identity and refusal are (a trial's context, the experiment's cache): the partners
    a suggestion its checks refuse alone is completed with (the baseline's)."""
    return setup.resolved_knobs


def _reap_leftovers(setup: Setup, echo: Print) -> None:
    """Kill what a killed earlier run of this experiment left (their owners are dead). A
    server whose owner (a Ray worker of that run) was still alive is an orphan once that
    worker is gone: hence a second pass."""
    reaped: list[int] = []
    for _ in range(3):
        found = process.reap(setup.marker_prefix)
        if not found:
            break
        reaped += found
    if reaped:
        echo(f"reaped {len(reaped)} leftover processes of an earlier run of {setup.spec.name}")


def _run(setup: Setup, spec: ExperimentSpec, out_dir: Path, *, resume: bool, echo: Print,
         arm: Callable[[], None]) -> RunOutcome:
    save_spec(spec)
    inputs = setup.workload.inputs(spec.seed)
    if inputs is not None:
        write_record(out_dir / INPUTS_JSON, InputsRecord.model_validate(inputs))
    for note in setup.space_notes():
        echo(note)
    _reap_leftovers(setup, echo)
    placement = setup.placement
    with ray_cluster(spec, setup.marker_prefix, echo, placement) as cluster:
        arm()  # over the SIGTERM handler ray.init installed
        gpus = node_gpus_per_trial(spec, cluster)
        slots = trial_slots(cluster, gpus, placement)
        resources: dict[str, float] = {"cpu": 1, "gpu": gpus} if gpus else {"cpu": 1}
        setup.gpus_per_trial = gpus
        write_record(out_dir / RUN_JSON, RunInfo(
            nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node, gpus_per_trial=gpus,
            nodes_per_trial=placement.nodes, trials_at_once=slots,
            dashboard_url=cluster.dashboard_url))
        held = placement.held(gpus)
        echo(f"{cluster.nodes} node(s), GPUs per node {cluster.gpus_per_node}; each trial holds "
             f"{held}; at most {slots} trial(s) at once")
        if cluster.dashboard_url:
            for line in login_lines(cluster.dashboard_url):
                echo(line)
        echo(f"TensorBoard: tensorboard --logdir {out_dir}")
        for note in setup.notes():
            echo(note)
        # A search resumes from the journal (replay), never from Ray's checkpoint: a driver
        # killed or stopped at once leaves that checkpoint missing or behind the journal.
        journal = search_state(out_dir) if resume else None
        study = Study(spec.optuna_storage, study_name(spec.name)) \
            if spec.optuna_storage else None
        if journal is not None and study is not None and journal.finished:
            echo(f"resume: the Optuna study {study.name!r} gets the replayed trials (and the "
                 "baseline, enqueued first) once more, then this session's")
        stack = build_search(setup.space, setup.objective, search=spec.search,
                             stage_search=spec.stage_search, samples=spec.samples,
                             seed=spec.seed, failure_aware=spec.failure_aware,
                             max_concurrent=slots, out_dir=out_dir,
                             points=spec.points or None, study=study,
                             weights=setup.weights, identity=setup.identity,
                             refusal=setup.refusal, resolved=resolved_knobs(setup),
                             workload=setup.workload.kind, nodes=placement.nodes)
        if study is not None:
            echo(f"Optuna study {study.name!r} in {study.storage} "
                 f"(optuna-dashboard {study.storage})")
        for note in [*stack.notes, *setup.weights.lines()]:
            echo(note)
        watch = EnvironmentWatch(out_dir, setup.space.baseline(), feed=stack.filtering)
        recorder = Recorder(out_dir, setup.objective, setup.space.baseline(),
                            watch=watch, stage_of=stack.stage_of)
        reporter = TrialLines(setup.objective.metric, list(setup.space.domains), spec.rounds,
                              stage_of=stack.stage_of)
        samples = stack.num_samples
        if journal is not None:  # finished trials count, interrupted ones run again
            echo(journal.line(samples))
            for note in replay(journal, stack.filtering, watch):
                echo(note)
            samples = max(0, samples - len(journal.finished))
        outcome = fit(FitPlan(
            name=out_dir.name, storage=out_dir.parent,
            trainable=make_trainable(setup, spec, resources), objective=setup.objective,
            search_alg=stack.search_alg,
            scheduler=build_scheduler(spec.scheduler, setup.objective, spread=setup.spread),
            num_samples=samples,
            callbacks=[recorder, *tracker_callbacks(spec.callbacks, spec.name)],
            reporter=reporter, reuse_actors=reuse_actors(spec.reuse_actors), stop=watch))
        # Read from the folder: a resumed Tuner runs the watch it restored, not this one.
        environment = broken.load(out_dir)
        # A stop by the user is reported as one (exit 130, resumable) even where the stop
        # itself made the baseline's launch fail and the watch call the environment broken.
        interrupted = outcome.interrupted
        if interrupted and environment is not None:
            broken.set_aside(out_dir)
            environment = None
            echo("the stop came while the environment looked broken: --resume checks it again")
        confirmed = None
        if not interrupted and environment is None:  # the confirm stage, the reference
            confirmed = confirm.run_stage(setup, resources, slots, echo=echo)
            interrupted = confirmed.interrupted
    return finish.finish(setup, interrupted=interrupted, echo=echo, confirm_data=confirmed,
                         broken_environment=environment)

