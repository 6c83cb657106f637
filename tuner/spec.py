"""ExperimentSpec: the validated description of one experiment (saved as DIR/servetune.json
by ``tuner.record.spec_file``).

CLI flags and an optional experiment YAML become one ExperimentSpec; a ValidationError
becomes a one-line CLI error (exit 2) before anything starts.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launchers.registry import AnyWorkloadArgs, default_args
from search_spaces.knobs import Value
from search_spaces.searches import DEFAULT as DEFAULT_SEARCH
from search_spaces.searches import DEFAULT_STAGE, SearchName, StageSearchName
from tuner.limits import SEARCH_KEY, WORST, Limit, level_column

DEFAULT_PRESET = "verify-campaign"

# The confirm stage's default cap (launches per configuration): sized in
# tuner/decide/sequential.py so that a 25% difference at a 10% launch-to-launch sd is decided.
CONFIRM_CAP = 10


@dataclass(frozen=True)
class Objective:
    """What a trial is scored on: the mean of ``metric`` over ``rounds`` rounds, within
    ``limits``. ``levels``: the concurrency levels a round measures (with several, each
    metric also has a column per level, ``<metric>_c<level>``); the search optimises
    ``decide_at``'s, under the plain names."""

    metric: str
    mode: str  # "max" | "min"
    rounds: int
    limits: tuple[Limit, ...] = ()
    levels: tuple[int, ...] = ()
    decide_at: int | None = None

    @property
    def search_metric(self) -> str:
        """What Ray's searcher and scheduler rank: the metric, or with limits the metric
        while they hold and the worst value once one breaks (tuner.limits)."""
        return SEARCH_KEY if self.limits else self.metric

    @property
    def worst(self) -> float:
        return -WORST if self.mode == "max" else WORST

    @property
    def per_level(self) -> bool:
        return len(self.levels) > 1

    def column(self, level: int | None) -> str:
        """The objective's column at a concurrency level."""
        return level_column(self.metric, level, self.levels)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.mode == "max" else a < b

    def speedup(self, score: float, baseline: float) -> float:
        if not baseline or not score:
            return math.nan
        return score / baseline if self.mode == "max" else baseline / score


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    out_dir: Path
    space: str = DEFAULT_PRESET
    pins: dict[str, Value] = {}
    # The user's own values of searched knobs (their --server-arg flags, their environment):
    # the baseline (SearchSpace.with_baseline); each trial's values override them.
    baseline: dict[str, Value] = {}
    workload: AnyWorkloadArgs = Field(default_factory=default_args)  # type: ignore[assignment]
    search: SearchName = DEFAULT_SEARCH
    stage_search: StageSearchName = DEFAULT_STAGE
    failure_aware: bool = True
    scheduler: Literal["asha", "median", "fifo"] = "asha"
    samples: int | None = Field(None, ge=1, description="trials, the baseline included; "
                                "None: sized from the space (tuner/search/levers.py)")
    rounds: int = Field(6, ge=1)
    metric: str | None = None
    mode: Literal["max", "min"] | None = None
    seed: int = 0
    gpus_per_trial: int | None = Field(None, ge=1)
    nodes_per_trial: int = Field(1, ge=1, description="whole nodes a trial holds (tensor "
                                 "parallelism across nodes, one server per node); more than "
                                 "one needs a Ray cluster (--address)")
    num_gpus: int | None = Field(None, ge=0)
    num_cpus: int | None = Field(None, ge=1)
    address: str | None = None
    dashboard: bool = True
    stop_grace: float = Field(10.0, gt=0)
    gpu_clean_timeout: float = Field(60.0, ge=0)
    confirm: int = Field(CONFIRM_CAP, ge=0, description=(
        "the confirm stage's cap: fresh launches per config at most (0: no confirm stage)"))
    confirm_time: float | None = Field(None, gt=0, description=(
        "the confirm stage's time cap in seconds (None: none)"))
    launch_spread: float | None = Field(None, ge=0, le=1, description=(
        "one launch's sd as a share of the mean: the search treats differences within it as "
        "ties (None: the workload's own figure)"))
    confirm_top: int = Field(3, ge=1)
    weights: Literal["auto", "real", "dummy"] = Field("auto", description=(
        "which weights the search's servers load: per stage (auto), the checkpoint's, or "
        "random ones everywhere (dummy: the confirm stage and the reference too)"))
    screen: Literal["proxy"] | None = Field(None, description="screen the NCCL part of the "
                                            "space on the proxy first (sglang workload)")
    screen_top: int = Field(3, ge=1)
    screen_spread: int = Field(2, ge=0, description="promoted settings from the middle and "
                               "bottom of the proxy's ranking, for the correlation")
    screen_samples: int | None = Field(None, ge=1)
    screen_model: str | None = Field(None, description="proxy shape for the screen; default: "
                                     "the model folder's config.json")
    points: list[dict[str, Value]] = Field([], description="evaluate exactly these configs "
                                           "(after the baseline) instead of searching")
    profile: bool = Field(False, description="profile the baseline and the chosen config at "
                          "the end of the run (servetune profile)")
    limits: list[Limit] = Field([], description="a trial that breaks one is infeasible: "
                                "reported with the figure, never chosen")
    optuna_storage: str | None = Field(None, description="an Optuna storage URL: the study, "
                                       "named after the experiment, is kept there")
    callbacks: list[Literal["wandb", "mlflow"]] = Field([], description="Ray Tune's logger "
                                                         "callbacks for these trackers")
    reuse_actors: bool | None = Field(None, description="reuse one Ray actor for many trials "
                                      "(saves 1-2 s a trial; each trial is still named in the "
                                      "dashboard's task list, where there is a dashboard); "
                                      "default: reuse")

    @property
    def experiment_dir(self) -> Path:
        return self.out_dir

    @property
    def marker_id(self) -> str:
        """The experiment part of the process marker: the name plus a digest of the folder, so
        that two experiments with one name in different folders never reap each other."""
        digest = hashlib.sha1(str(self.out_dir.resolve()).encode()).hexdigest()[:8]
        return f"{self.name}@{digest}"


class SpecError(ValueError):
    """Bad input, reported as one line with exit code 2."""


def one_line(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__
