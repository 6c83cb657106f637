"""Setup: everything an experiment derives from its spec without starting anything (the
workload, the space it can search, the objective), shared by every room of the engine."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from launchers.base import LaunchPlan, TrialContext, Workload
from launchers.multinode import Placement
from search_spaces.knobs import Group, Value
from search_spaces.space import SearchSpace, SpaceError, load
from tuner.record.files import RUN_JSON
from tuner.record.info import RunInfo, read_record
from tuner.spec import ExperimentSpec, Objective
from tuner.weights import WeightPlan
from tuner.weights import plan as weight_plan

RUN_INFO = RUN_JSON  # run.json: what the run held (tuner.record.info.RunInfo)
Print = Callable[[str], None]


def stdout_print(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


@dataclass
class Setup:
    """The experiment as the engine sees it."""

    spec: ExperimentSpec
    workload: Workload
    space: SearchSpace
    objective: Objective
    dropped: list[str] = field(default_factory=list)
    gpus_per_trial: int = 0  # known once Ray is up (run.json keeps it)
    unmodelled: list[str] = field(default_factory=list)  # values left out: "KNOB=value: why"
    weights: WeightPlan = field(default_factory=WeightPlan)  # per stage: random or real weights
    left_out: list[str] = field(default_factory=list)  # knobs this experiment leaves out, why
    # The nodes a trial holds: --nodes-per-trial made a Placement once, by prepare().
    placement: Placement = field(default_factory=Placement)

    def space_notes(self) -> list[str]:
        """What left the space before the search, and why (run, plan and the report say it)."""
        kind = self.workload.kind
        out = [f"not modelled by the {kind} workload, left at default: "
               f"{', '.join(self.dropped)}"] if self.dropped else []
        out += [f"not modelled by the {kind} workload, left out: {n}" for n in self.unmodelled]
        if self.space.base:
            given = ", ".join(f"{n}={v}" for n, v in self.space.base.items())
            out.append(f"baseline: your own settings ({given}); each trial's values override "
                       "them, and the unset values (the defaults) are tried too")
        return out + self.left_out

    @property
    def spread(self) -> float:
        """One launch's sd as a share of the mean: the user's, else the workload's."""
        given = self.spec.launch_spread
        return self.workload.launch_spread if given is None else given

    @property
    def out_dir(self) -> Path:
        return self.spec.out_dir

    @property
    def marker_prefix(self) -> str:
        return f"{self.spec.marker_id}/"

    def context(self, label: str, folder: Path | None = None, port: int | None = None
                ) -> TrialContext:
        """A trial context outside Ray (plan, notes, exports): GPUs as a trial holds them."""
        gpus = tuple(str(i) for i in range(self.gpus_per_trial))
        return TrialContext(self.spec.name, label, folder or self.out_dir / label, gpus, port,
                            self.spec.seed, self.placement.nodes, self.placement.meeting)

    def production_plan(self, config: dict[str, Value], folder: Path) -> LaunchPlan:
        """``config`` as a user would launch it (best/launch.sh): the production port, no
        measuring env."""
        args = self.spec.workload
        ctx = self.context("best", folder, args.port or args.production_port)
        return self.workload.production_plan(dict(config), ctx)

    def identity(self, config: Mapping[str, Value]) -> str | None:
        """When two configurations are one point: what the workload resolves them to (SGLang's
        own resolution, on the driver, planned as a trial runs it); None: unknown (the search
        uses SGLang's known rules)."""
        return self.workload.identity(config, self._driver_context())

    def refusal(self, config: Mapping[str, Value]) -> str | None:
        """Why the workload's own checks, asked on the driver as a trial's preflight asks
        them, refuse ``config`` (None: they accept it, or cannot be asked here)."""
        return self.workload.refusal(config, self._driver_context())

    def resolved_knobs(self, config: Mapping[str, Value]) -> dict[str, Value] | None:
        """What the server's own resolution sets ``config``'s flag knobs to, asked on the
        driver as a trial would (Workload.resolved_knobs); None: unknown here."""
        return self.workload.resolved_knobs(config, self._driver_context())

    def _driver_context(self) -> TrialContext:
        """A trial's context on the driver: its GPUs, the experiment's marker and cache."""
        args = self.spec.workload
        ctx = self.context("identity", self.out_dir.resolve() / "identity",
                           args.port or args.production_port)
        return replace(ctx, experiment=self.spec.marker_id)

    def notes(self) -> tuple[str, ...]:
        """What the workload says about itself on this machine (the proxy on CPU: NCCL knobs
        have no effect), read from the baseline's plan."""
        args = self.spec.workload
        port = args.port or args.production_port or 30000  # a plan needs one; any will do
        return self.workload.plan(self.space.baseline(),
                                  self.context("notes", port=port)).notes


def prepare(spec: ExperimentSpec) -> Setup:
    """Load and check the space for this workload; raises SpecError/SpaceError on bad input."""
    workload = spec.workload.build()
    placement = Placement(spec.nodes_per_trial)
    space, left_out = _single_node(load(spec.space).with_pins(spec.pins), placement)
    supported = {n for n in [*space.domains, *space.pins] if workload.supports(space.knob(n))}
    space, dropped = space.restricted_to(frozenset(supported))
    space, unmodelled = _drop_unmodelled(space, workload)
    space = space.with_baseline(spec.baseline)
    space, unranked = workload.rankable(space)
    unmodelled += unranked
    if not space.domains:
        raise SpaceError(f"{spec.space}: the space is empty for the {workload.kind} workload "
                         f"(it does not model: {', '.join(dropped or unmodelled)})")
    metric = spec.metric or workload.default_metric
    mode = spec.mode or workload.default_mode
    objective = Objective(metric, mode, spec.rounds, tuple(spec.limits),
                          tuple(spec.workload.levels()), spec.workload.decide_level())
    setup = Setup(spec, workload, space, objective, dropped, unmodelled=unmodelled,
                  placement=placement,
                  weights=weight_plan(spec, space, workload, objective), left_out=left_out)
    run = read_record(spec.out_dir / RUN_JSON, RunInfo)
    if run is not None and run.gpus_per_trial is not None:
        setup.gpus_per_trial = int(run.gpus_per_trial)
    return setup


def _single_node(space: SearchSpace, placement: Placement) -> tuple[SearchSpace, list[str]]:
    """With one node per trial, the network knobs (NCCL's, and gloo's interface) leave the
    space: nothing crosses the network within a node, so they could only add noise."""
    network = [n for n in [*space.domains, *space.pins] if space.knob(n).group is Group.NETWORK]
    if placement.across_nodes or not network:
        return space, []
    kept = frozenset(n for n in [*space.domains, *space.pins] if n not in network)
    space, _ = space.restricted_to(kept)
    return space, [f"one node per trial: the network settings left out (NCCL and gloo send "
                   f"nothing over the network within a node; --nodes-per-trial 2 or more tunes "
                   f"them): {', '.join(network)}"]


def _drop_unmodelled(space: SearchSpace, workload: Workload) -> tuple[SearchSpace, list[str]]:
    """The values the workload cannot run here leave the space (never silently run as the
    default): a knob left with only its default leaves the search."""
    notes: list[str] = []
    domains = dict(space.domains)
    for name, values in space.domains.items():
        why = workload.unmodelled(space.knob(name))
        gone = [v for v in values if v in why and v is not None]
        if not gone:
            continue
        notes += [f"{name}={v}: {why[v]}" for v in gone]
        kept = tuple(v for v in values if v not in gone)
        if len(kept) > 1:
            domains[name] = kept
        else:
            del domains[name]
    if not notes:
        return space, notes
    stages = tuple(replace(s, knobs=tuple(k for k in s.knobs if k in domains))
                   for s in space.stages)
    return replace(space, domains=domains, stages=stages), notes
