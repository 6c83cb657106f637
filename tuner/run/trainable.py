"""The Ray Tune trainable: one whole-node trial of the experiment's workload.

Its name (``servetune_trial``, see ``tuner.run.dashboard``) is what the Ray dashboard lists
for trial actors; ``Tuner.restore`` needs the same name on resume."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from launchers import process
from launchers.base import TrialContext
from launchers.priority import match_parent_priority
from tuner.limits import LimitTracker
from tuner.run.dashboard import Resources, name_trial, named_trainable, task_list_shown
from tuner.run.lifecycle import Limits
from tuner.setup import Setup, prepare
from tuner.spec import ExperimentSpec

_GUARDS: list[ExitGuard] = []  # this worker's trials (one at a time), for ``wind_down``


def servetune_trial(config: dict[str, Any], spec_json: str) -> None:
    """One trial inside Ray: the context from Ray (trial id, GPUs, node), then ``run_trial``."""
    import ray
    from ray import tune

    from tuner.run.nodes import across_nodes
    from tuner.run.trial import resolve_port, run_trial

    spec = ExperimentSpec.model_validate_json(spec_json)
    setup = prepare(spec)
    trial_id = tune.get_context().get_trial_id()
    if trial_id is None:
        raise RuntimeError("servetune_trial runs only inside a Ray Tune trial")
    # Artifacts go straight into the experiment folder (Ray's own trial folder has the same
    # name): Ray's working dir is a staging copy that is synced late or not at all.
    ctx = TrialContext(spec.marker_id, trial_id, spec.out_dir.resolve() / trial_id,
                       tuple(str(g) for g in ray.get_gpu_ids()),
                       resolve_port(spec.workload.port), spec.seed)
    node_id = ray.get_runtime_context().get_node_id()
    if task_list_shown(spec.dashboard, spec.address):
        name_trial(spec.name, trial_id)  # findable in the dashboard's task list
    objective = setup.objective
    limits = LimitTracker(objective.metric, objective.limits, objective.worst)

    def report(metrics: dict[str, Any]) -> None:
        # Which node ran the trial (nodes of one host share an IP): a column of results.csv;
        # with limits, the score the search ranks (the worst value once one breaks).
        tune.report({**metrics, **limits.update(metrics), "node_id": node_id})

    # Ray's workers run at niceness +15 and the server would inherit it (launchers.priority).
    priority = match_parent_priority()
    guard = ExitGuard(ctx.marker, spec.stop_grace)
    atexit.register(guard)
    _GUARDS.append(guard)
    try:  # across nodes: the trial's other nodes, each starting its server there
        with across_nodes(ctx, setup.workload, setup.placement, spec.gpu_clean_timeout,
                          own_ports=spec.workload.port == 0) as (ctx, workload):
            run_trial(config, space=setup.space, workload=workload, ctx=ctx,
                      rounds=spec.rounds, report=report, limits=limits_of(spec),
                      experiment_prefix=setup.marker_prefix, stopping=guard.stopping,
                      notes=[priority] if priority else [])
    finally:
        guard.done.set()
        atexit.unregister(guard)
        _GUARDS.remove(guard)


def limits_of(spec: ExperimentSpec) -> Limits:
    return Limits(spec.workload.ready_timeout, spec.stop_grace, spec.gpu_clean_timeout)


def make_trainable(setup: Setup, spec: ExperimentSpec, resources: Mapping[str, float]) -> type:
    """The trainable class for ``spec`` (the experiment's, or its reference variant):
    actors listed as servetune_trial, repr "<experiment>/<trial id>"; ``resources`` are one
    node's, and a trial across nodes holds them on each of its nodes."""
    held: Resources = resources
    if setup.placement.across_nodes:
        from tuner.run.nodes import bundles

        held = bundles(resources, setup.placement)
    return named_trainable(servetune_trial, held, setup.spec.name, on_stop=wind_down,
                           spec_json=spec.model_dump_json())


def wind_down() -> None:
    """The trial actor's ``cleanup`` (Ray Tune's stop of a trial, ASHA's included): the
    server tree stopped and the trial's own record written before Ray ends the worker. At
    exit alone (``ExitGuard`` via atexit) a loaded box lost the race: Ray killed the worker
    before the stopped trial recorded its teardown."""
    for guard in list(_GUARDS):  # the trial's own thread removes its guard as it ends
        guard()


class ExitGuard:
    """Ray ends a stopped trial's worker process without waiting for the trial's own
    ``finally`` (Ray's cleanup does not wait for the training thread), and then kills the
    worker's children. The guard stops the trial's server tree by its marker (setsid
    grandchildren too) and gives the trial a few seconds to record itself, so a stopped trial
    leaves its folder complete and its node free before the next trial starts there: called
    from the actor's cleanup (``wind_down``), and at exit (atexit) for an end without one."""

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
        # a loaded box can take long to record: waiting costs nothing once the trial is done
        self.done.wait(timeout=self.grace + 20.0)
