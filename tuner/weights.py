"""The weight policy: which weights each stage's servers load, the checkpoint's or random ones
(``weights=dummy``: SGLang's ``--load-format dummy``, no checkpoint read).

A stage may run on random weights when its objective is a timing of fixed work that random
weights leave unchanged (verify ms, cycle ms; the workload says which metrics are). A stage
that tunes the speculative shape, and any objective that depends on acceptance (tok/s with
speculative decoding on), loads the checkpoint; so does the confirm stage, which decides.
``--weights auto`` (the default) chooses so per stage; ``real`` and ``dummy`` override it for
every stage (``dummy``: the confirm stage and the reference too, for a machine without the
checkpoint). The policy steps aside when the user's server arguments or the space set
the load format themselves, and does not apply to a workload that loads no weights (the proxy).

The limit, stated with every plan that uses random weights: an MoE router fed random weights
spreads tokens over the experts differently, so MoE compute can differ; the confirm stage, on
the checkpoint's weights, is what decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launchers.base import Workload, WorkloadArgs
from search_spaces.knobs import DUMMY, WEIGHTS, Group, Value, expand_config, primitive_names
from search_spaces.searches import strategy
from search_spaces.space import SearchSpace
from tuner.spec import ExperimentSpec, Objective, SpecError

AUTO, REAL = "auto", "real"
BASELINE = "baseline"
SEARCH = "search"  # a search that is not staged: one stage
ALL = "all"  # a staged search over a space without stages (the staged searcher's name)
CONFIRM = "confirm"
MOE_LIMIT = ("with random weights an MoE router spreads tokens over the experts differently, "
             "so MoE compute can differ")
LIMIT = f"{MOE_LIMIT}; the confirm stage, on the checkpoint's weights, decides"
LOAD_FLAGS = tuple(expand_config({WEIGHTS: DUMMY}))  # --load-format, its draft twin


@dataclass(frozen=True)
class StageWeights:
    stage: str
    dummy: bool
    why: str


@dataclass(frozen=True)
class WeightPlan:
    """Per stage (the baseline first), random weights or the checkpoint's. No stages: the
    policy does not apply, and ``note`` may say why."""

    choice: str = AUTO
    stages: tuple[StageWeights, ...] = ()
    note: str | None = None
    warnings: tuple[str, ...] = field(default=())
    confirm: bool = True  # the experiment has a confirm stage (--confirm > 0)

    @property
    def applies(self) -> bool:
        return bool(self.stages)

    def dummy(self, stage: str | None) -> bool:
        return any(s.dummy for s in self.stages if s.stage == stage)

    @property
    def confirm_dummy(self) -> bool:
        """The confirm stage (and the reference) on random weights: ``--weights dummy`` only."""
        return self.choice == DUMMY

    def pins(self, stage: str) -> dict[str, Value]:
        """What a trial of ``stage`` adds to its config: ``weights`` (None: the checkpoint's).
        The confirm stage and the reference without speculative decoding load the
        checkpoint's, except with ``--weights dummy``: random weights everywhere."""
        if not self.applies:
            return {}
        dummy = self.confirm_dummy if stage == CONFIRM else self.dummy(stage)
        return {WEIGHTS: DUMMY if dummy else None}

    def stage_pins(self) -> dict[str, dict[str, Value]]:
        return {s.stage: self.pins(s.stage) for s in self.stages}

    def lines(self) -> list[str]:
        """What the run prints before its first trial."""
        if not self.applies:
            return [f"weights: {self.note}"] if self.note else []
        hint = "" if self.choice == REAL else "; --weights real loads the checkpoint everywhere"
        out = [f"weights (--weights {self.choice}{hint}):"]
        for dummy in (True, False):
            groups: dict[str, list[str]] = {}
            for s in self.stages:
                if s.dummy == dummy:
                    groups.setdefault(s.why, []).append(s.stage)
            for why, names in groups.items():
                kind = "random (--load-format dummy, no checkpoint read)" if dummy \
                    else "the checkpoint's"
                out.append(f"  {', '.join(names)}: {kind}: {why}")
        if self.confirm and self.confirm_dummy:
            out.append(f"  {CONFIRM}: random (--weights dummy): the decision is judged on "
                       "random weights too")
        elif self.confirm:
            out.append(f"  {CONFIRM}: the checkpoint's: it decides")
        out += [f"  warning: {w}" for w in self.warnings]
        if any(s.dummy for s in self.stages):
            decides = self.confirm and not self.confirm_dummy
            out.append(f"  limit: {LIMIT if decides else MOE_LIMIT}")
        return out

    def summary(self) -> str:
        """One line: which stages load which weights."""
        if not self.applies:
            return self.note or "as the server loads them"
        dummy = [s.stage for s in self.stages if s.dummy]
        real = [s.stage for s in self.stages if not s.dummy]
        if self.confirm:
            (dummy if self.confirm_dummy else real).append(CONFIRM)
        parts = [f"random (--load-format dummy) for {', '.join(dummy)}"] if dummy else []
        if real:
            parts.append(f"the checkpoint's for {', '.join(real)}")
        return "; ".join(parts) + f" (--weights {self.choice})"


def stage_knobs(spec: ExperimentSpec, space: SearchSpace) -> list[tuple[str, tuple[str, ...]]]:
    """The stages trials are launched in, with the knobs each searches (the baseline first,
    with the first stage's knobs: it is that stage's reference)."""
    if not strategy(spec.search).staged or spec.points:
        stages = [(SEARCH, tuple(space.domains))]
    else:
        stages = [(s.name, s.knobs) for s in space.stages if s.knobs] or [
            (ALL, tuple(space.domains))]
    return [(BASELINE, stages[0][1]), *stages]


def _given(args: WorkloadArgs, space: SearchSpace) -> str | None:
    """Who sets the load format, when not the policy."""
    flags = sorted(set(LOAD_FLAGS) & args.server_flags())
    if flags:
        return f"--server-arg sets {flags[0]}"
    if set(LOAD_FLAGS) & primitive_names([*space.domains, *space.pins]):
        return f"the space {space.name} sets the load format"
    return None


def plan(spec: ExperimentSpec, space: SearchSpace, workload: Workload, objective: Objective
         ) -> WeightPlan:
    """The weights of every stage. Raises SpecError when ``--weights`` asks for what the
    user's own arguments contradict."""
    if WEIGHTS in space.domains or WEIGHTS in space.pins:
        raise SpecError(f"{WEIGHTS}: set by --weights, not searched or pinned in the space")
    choice = spec.weights
    metric = objective.metric
    free = workload.weight_free(metric)
    if free is None:  # nothing to load (a note only: a screen's proxy runs with this spec)
        return WeightPlan(choice, note=None if choice == AUTO else
                          f"the {workload.kind} workload loads no weights: --weights {choice} "
                          "has no effect")
    given = _given(spec.workload, space)
    if given is not None:
        if choice != AUTO:
            raise SpecError(f"--weights {choice}: {given} already")
        return WeightPlan(choice, note=f"{given}: every trial loads as it says")
    stages, warnings = [], []
    for name, names in stage_knobs(spec, space):
        speculative = any(space.knob(n).group is Group.SPECULATIVE for n in names)
        if speculative:
            auto = StageWeights(name, False, "it tunes the speculative shape, which acceptance "
                                "judges")
        elif not free:
            auto = StageWeights(name, False, f"{metric} depends on the weights' values "
                                "(acceptance)")
        else:
            auto = StageWeights(name, True, f"{metric} times fixed work, which random weights "
                                "leave unchanged")
        if choice == AUTO:
            stages.append(auto)
            continue
        stages.append(StageWeights(name, choice != REAL, f"--weights {choice}"))
        if choice != REAL and not auto.dummy and name != BASELINE:
            warnings.append(f"stage {name} ranks on random weights although {auto.why}")
    return WeightPlan(choice, tuple(stages), warnings=tuple(warnings),
                      confirm=spec.confirm > 0)
