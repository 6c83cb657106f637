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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from launchers.process import LOCALHOST, ServerProcess, check_env_values, marker_value
from search_spaces.knobs import CATALOGUE, Knob, KnobKind, Value

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
    """The env part of a configuration: variables to set, and env knobs left unset."""
    env: dict[str, str] = {}
    unset: list[str] = []
    for name, value in config.items():
        knob = CATALOGUE[name]
        if knob.kind is not KnobKind.ENV:
            continue
        text = knob.render_env(value)
        if text is None:
            unset.append(name)
        else:
            env[name] = text
    return env, tuple(sorted(unset))


def knob_argv(config: Mapping[str, Value]) -> list[str]:
    """The flag part of a configuration, in catalogue order (stable)."""
    argv: list[str] = []
    for name, knob in CATALOGUE.items():
        if name in config and knob.kind is KnobKind.FLAG:
            argv += knob.render_argv(config[name])
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

    def supports(self, knob: Knob) -> bool:
        """Whether a knob has any effect on this workload (others are left out of the space)."""
        return True

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

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}


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
