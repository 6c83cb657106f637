"""The workload contract: plan -> preflight -> start -> wait_ready -> measure (rounds) -> stop.

A workload turns a configuration (knob name -> value) into a LaunchPlan (argv + env, pure:
the same config always gives the same plan), checks it before launching, starts it as one
marked process tree, and measures it in rounds. Launchers never import Ray.
"""

from __future__ import annotations

import json
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from launchers.options import CliOption
from launchers.process import LOCALHOST, ServerProcess, check_env_values, marker_value
from launchers.trace.events import StepSpans
from search_spaces.knobs import (
    CATALOGUE,
    Knob,
    KnobKind,
    Value,
    expand_config,
    renderer,
    without_weights,
)
from search_spaces.space import SearchSpace

Metrics = dict[str, Any]  # metric name -> float, or None when the server does not expose it


@dataclass(frozen=True)
class TrialContext:
    """Where and as what a trial runs."""

    experiment: str
    trial_id: str
    trial_dir: Path
    gpu_ids: tuple[str, ...] = ()  # as Ray assigned them (CUDA_VISIBLE_DEVICES entries)
    port: int | None = None  # the port this trial's server listens on (resolved by the trial)
    seed: int = 0
    # A trial across nodes (launchers.multinode): how many, and where their processes meet
    # (rank 0's node address and a free port there).
    nodes: int = 1
    dist_init_addr: str | None = None

    @property
    def marker(self) -> str:
        return marker_value(self.experiment, self.trial_id)


@dataclass(frozen=True)
class LaunchPlan:
    """What to run: argv (no shell), the env servetune sets on top of the inherited one, and
    env names it removes (knobs the config leaves unset that the caller's env had set)."""

    workload: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    unset_env: tuple[str, ...] = ()
    port: int | None = None
    host: str = LOCALHOST
    notes: tuple[str, ...] = ()
    # A trial across nodes: the plans of nodes 1..N-1 (this plan is node 0's, the one served
    # and benchmarked); each runs on its own node (launchers.multinode).
    peers: tuple[LaunchPlan, ...] = ()

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for name in self.unset_env:
            env.pop(name, None)
        env.update(self.env)
        check_env_values(env)
        return env

    def shell_script(self) -> str:
        """A bash script that runs the plan as is; every value shell-quoted."""
        lines = ["#!/usr/bin/env bash", "# written by servetune", "set -euo pipefail"]
        lines += [f"unset {name}" for name in self.unset_env]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines.append("exec " + " ".join(shlex.quote(a) for a in self.argv))
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["env"] = dict(self.env)
        return data


def knob_env(config: Mapping[str, Value]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The env part of a configuration (composites expanded): variables to set, and env
    knobs left unset."""
    env: dict[str, str] = {}
    unset: list[str] = []
    for name, value in expand_config(config).items():
        knob = renderer(name)
        if knob.kind is not KnobKind.ENV:
            continue
        text = knob.render_env(value)
        if text is None:
            unset.append(name)
        else:
            env[name] = text
    return env, tuple(sorted(unset))


def knob_argv(config: Mapping[str, Value]) -> list[str]:
    """The flag part of a configuration (composites expanded): catalogue flags in catalogue
    order, then a space's open flags by name (stable)."""
    expanded = expand_config(config)
    argv: list[str] = []
    for name, knob in CATALOGUE.items():
        if name in expanded and knob.kind is KnobKind.FLAG:
            argv += knob.render_argv(expanded[name])
    for name in sorted(n for n in expanded if n not in CATALOGUE and n.startswith("--")):
        argv += renderer(name).render_argv(expanded[name])
    return argv


class Running(ABC):
    """A started workload. Always used as a context manager so that stop() runs on every path."""

    process: ServerProcess

    @abstractmethod
    def wait_ready(self, timeout: float) -> float:
        """Block until ready; return seconds from start. Raises TrialFailed."""

    def warmup(self) -> None:  # noqa: B027 - optional hook
        """Work done once after readiness and before the measured rounds."""

    @abstractmethod
    def measure(self, round_index: int) -> Metrics:
        """One benchmark round. Raises TrialFailed if the server dies or hangs."""

    def effective(self) -> dict[str, Any]:
        """What actually ran (NCCL's own log), where known."""
        return {}

    def ran_notes(self) -> list[str]:
        """Warnings learned from the running server (it runs other than planned), after the
        warm-up; kept with the trial."""
        return []

    def startup(self) -> dict[str, float | None]:
        """Where the time to ready went (seconds, None where unknown), e.g. launch -> weights
        loaded -> graphs captured -> ready; {} for a workload that does not tell."""
        return {}

    def profile(self, steps: int) -> list[Path]:
        """Profile about ``steps`` verify steps while the workload runs; return the Chrome
        trace files written (one per rank), for ``launchers.trace``. Raises TrialFailed."""
        raise NotImplementedError(f"{type(self).__name__} cannot profile")

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Workload(ABC):
    """One kind of thing to tune. Implementations live next to their args model."""

    kind: ClassVar[str]
    default_metric: ClassVar[str]
    default_mode: ClassVar[str] = "max"
    # How the workload's profiles name a step (launchers.trace reads its traces with these).
    step_spans: ClassVar[tuple[StepSpans, ...]] = ()
    # Env a trial sets only to measure; a production launch (best/launch.sh) leaves it out.
    measurement_env: ClassVar[tuple[str, ...]] = (
        "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES")

    # Metrics a round has only with speculative decoding on (a run without it has none).
    speculative_metrics: ClassVar[tuple[str, ...]] = ()
    # One launch's sd as a share of the mean, where nothing else says (--launch-spread): the
    # search treats differences within it as ties (TiedASHA).
    launch_spread: ClassVar[float] = 0.0

    def supports(self, knob: Knob) -> bool:
        """Whether a knob has any effect on this workload (others are left out of the space)."""
        return True

    def weight_free(self, metric: str) -> bool | None:
        """Whether ``metric`` comes out the same on random weights (``weights=dummy``) as on
        the checkpoint's: True for a timing of fixed work, False where the weights' values
        enter (speculative acceptance); None when the workload loads no weights at all."""
        return None

    def unmodelled(self, knob: Knob) -> dict[Value, str]:
        """Values of a supported knob this workload cannot run, each with the reason: the
        engine drops them from the space (with a note) instead of failing trials on them."""
        return {}

    @abstractmethod
    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        """Pure: the same config and context always give the same plan."""

    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        """Checks before launching; raise TrialFailed (invalid_config, port_busy, ...).
        Returns warnings worth keeping with the trial."""
        return []

    @abstractmethod
    def start(self, plan: LaunchPlan, ctx: TrialContext) -> Running:
        """Spawn the plan as one marked process tree, logging into ctx.trial_dir."""

    def identity(self, config: Mapping[str, Value], ctx: TrialContext) -> str | None:
        """What this configuration resolves to on the server, as a key two configurations
        that run alike share (None: unknown here; the search then uses known rules). ``ctx``:
        a trial's, on the driver (its GPUs, the experiment's folder)."""
        return None

    def refusal(self, config: Mapping[str, Value], ctx: TrialContext) -> str | None:
        """Why the server's own checks, asked on the driver (``ctx``: a trial's), refuse
        this configuration: it would end ``invalid_config`` at its preflight. None: they
        accept it, or cannot be asked here."""
        return None

    def resolved_knobs(self, config: Mapping[str, Value], ctx: TrialContext
                       ) -> dict[str, Value] | None:
        """What the server's own resolution, asked on the driver (``ctx``: a trial's), sets
        this configuration's flag knobs to, unset ones included (SGLang picks the speculative
        shape itself), by knob name. None: unknown here. The search completes a suggestion
        the checks refuse alone with its partners at the baseline's values."""
        return None

    def ran(self, config: Mapping[str, Value], trial_dir: Path) -> dict[str, Value]:
        """What the server of the trial in ``trial_dir`` ran for each knob of ``config`` it
        resolved itself (e.g. SGLang: ``--speculative-num-draft-tokens`` from the steps),
        as the trial recorded it; {} where unknown (the config ran as asked)."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}

    def metric_names(self) -> frozenset[str] | None:
        """The numeric names a round reports (None: not known ahead of a run). A limit on a
        name outside them is bad input."""
        return None

    def rankable(self, space: SearchSpace) -> tuple[SearchSpace, list[str]]:
        """``space`` without the knobs this workload cannot rank on its own figures, and
        why each left (e.g. the proxy without a measured accept length: the speculative
        shape). Default: the space as it is."""
        return space, []

    def inputs(self, seed: int) -> dict[str, Any] | None:
        """What the workload measures with (e.g. the prompts' dataset), recorded once per
        experiment; raises ValueError when the inputs are unusable (bad input)."""
        return None

    def production_plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        """The plan as a user would launch it: the trial's plan on the checkpoint's weights
        (random weights are the weight policy's, for measuring) and without its measuring
        env, except a variable the configuration itself sets to that value."""
        settings = without_weights(config)
        plan = self.plan(settings, ctx)
        own = knob_env(settings)[0]

        def production(node: LaunchPlan) -> LaunchPlan:
            return replace(node, env={k: v for k, v in node.env.items()
                                      if k not in self.measurement_env or own.get(k) == v})

        return replace(production(plan), peers=tuple(production(p) for p in plan.peers))


class WorkloadArgs(BaseModel):
    """A workload's base arguments: validated at the CLI edge, saved in the experiment's spec.
    Each workload declares one subclass (``kind`` a Literal) next to its Workload class and
    lists it in ``launchers.registry``; the engine knows workloads only through this API."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    port: int = 0  # 0: a free port per trial
    ready_timeout: float = 1800.0
    workdir: Path | None = None  # where servers start: the folder servetune was started in

    # The options this workload takes on the command line (the CLI assembles them).
    cli_options: ClassVar[tuple[CliOption, ...]] = ()
    # The port a production launch (best/launch.sh) uses when the args leave it to each trial.
    production_port: ClassVar[int | None] = None
    # Whether one configuration can run across several nodes (--nodes-per-trial): the
    # workload's plan then holds a plan per node (LaunchPlan.peers).
    multi_node: ClassVar[bool] = False

    def build(self) -> Workload:
        raise NotImplementedError(f"{type(self).__name__}.build")

    # CLI options that select this workload when given (``--model``: sglang).
    cli_selectors: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def cli_fields(cls) -> dict[str, str]:
        """CLI option (argparse dest) -> the field of this model it sets."""
        return {o.dest: o.field for o in cls.cli_options}

    def checks(self, space: SearchSpace, experiment: str) -> list[str]:
        """Bad input found before anything launches, for a run over ``space`` (each reason
        one line); ``experiment`` names the marker of any helper process a check starts."""
        return []

    def server_flags(self) -> frozenset[str]:
        """Server flags the base args set themselves (the user's server arguments)."""
        return frozenset()

    def gpu_shortfall(self, node_gpus: int | None) -> str | None:
        """Why a node with ``node_gpus`` GPUs cannot run these args (None: it can, or the
        count is unknown): bad input for ``run``, a note for ``plan``."""
        return None

    def with_measured(self, metrics: list[str]) -> WorkloadArgs:
        """These args told which metrics the experiment measures (its objective and limits),
        for a workload whose trials can skip what the measurement does not use."""
        return self

    def without_speculative(self) -> WorkloadArgs | None:
        """These args with speculative decoding off, or None when it is off (or the
        workload has no such switch): the reference run of the confirm stage."""
        return None

    def speculative_label(self) -> str | None:
        """The speculative algorithm, for the report (None when off or not named)."""
        return None

    def shape_source(self) -> str | None:
        """A model shape (preset or config.json) the proxy can screen with, if known."""
        return None

    def tp_ranks(self) -> int | None:
        """Tensor-parallel ranks the args fix (None: every GPU of the trial)."""
        return None

    def levels(self) -> list[int]:
        """The concurrency levels each round measures, sorted; with several, every metric
        is also reported per level as ``<name>_c<level>``. [] for a workload without."""
        return []

    def decide_level(self) -> int | None:
        """The level the plain metric names report (the one the search optimises)."""
        return None


@dataclass
class TrialRecord:
    """Everything a trial leaves in its folder as trial.json."""

    trial_id: str
    config: dict[str, Value]
    plan: dict[str, Any] | None = None
    status: str = "running"
    rounds: list[Metrics] = field(default_factory=list)
    failure: dict[str, Any] | None = None
    effective: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "trial.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1, default=str))
        tmp.replace(folder / "trial.json")
