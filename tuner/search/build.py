"""The searcher stack and the scheduler for an experiment.

searcher = ConcurrencyLimiter(FilteringSearcher(auto | random | grid | Optuna | staged)), where
FilteringSearcher is a chain of wrappers, one concern each (filtering.py composes it).
The baseline is always the first suggestion, and runs alone when one trial runs at a time.
Without ``samples`` the budget is sized from the space (``budget.sized_budget``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from search_spaces.searches import AUTO, strategy
from search_spaces.space import SearchSpace
from tuner.record.files import COMPLETED, REJECTED, STAGES_JSON
from tuner.record.info import Completed, Entry, Rejected, append_entry
from tuner.search.auto import AutoSearcher
from tuner.search.budget import estimate, sized_budget
from tuner.search.filtering import FilteringSearcher
from tuner.search.fixed import FixedPoints
from tuner.search.keys import Identity, Refusal, Resolved
from tuner.search.memory import FailureMemory
from tuner.search.space_searcher import SpaceSearcher
from tuner.search.staged import StagedSearcher
from tuner.search.study import open_storage, study_name
from tuner.search.tied import TiedASHA
from tuner.spec import Objective
from tuner.weights import SEARCH, WeightPlan


@dataclass(frozen=True)
class Study:
    """Where Optuna keeps its study (``--optuna-storage``) and the study's name."""

    storage: str
    name: str


def optuna_searcher(space: SearchSpace, objective: Objective, seed: int,
                    study: Study | None = None) -> Searcher:
    """Optuna TPE over the space's categorical knobs, the baseline enqueued first; with
    ``study``, the study lives in that storage under that name (Ray's own arguments)."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    categorical = optuna.distributions.CategoricalDistribution
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        n: categorical(list(v)) for n, v in space.domains.items()}
    baseline = space.baseline()
    return OptunaSearch(space=distributions, metric=objective.search_metric,
                        mode=objective.mode,
                        points_to_evaluate=[{n: baseline[n] for n in space.domains}],
                        sampler=optuna.samplers.TPESampler(seed=seed),
                        storage=open_storage(study.storage) if study else None,
                        study_name=study.name if study else None)


def leaf_searcher(kind: str, space: SearchSpace, objective: Objective, seed: int,
                  study: Study | None = None) -> Searcher:
    if strategy(kind).optuna:
        return optuna_searcher(space, objective, seed, study)
    return SpaceSearcher(space, kind, seed, objective.search_metric, objective.mode)


class _StageInner:
    """Picklable factory for a stage's searcher (Ray pickles the searcher with the Tuner,
    where a closure would not do)."""

    def __init__(self, kind: str, objective: Objective, study: Study | None = None) -> None:
        self.kind = kind
        self.objective = objective
        self.study = study

    def __call__(self, space: SearchSpace, seed: int, kind: str | None = None) -> Searcher:
        """``kind``: the stage's own searcher from the space file, else --stage-search;
        with a study, each stage keeps its own (``<experiment>:<stage>``)."""
        study = None if self.study is None else Study(
            self.study.storage, study_name(self.study.name, space.name.rpartition(":")[2]))
        return leaf_searcher(kind or self.kind, space, self.objective, seed, study)


class _JsonlLog:
    """Appends each entry, as its record, to a JSON-lines file of the experiment's
    (picklable, unlike a closure): rejected.jsonl, completed.jsonl."""

    def __init__(self, path: Path, model: type[Entry]) -> None:
        self.path = path
        self.model = model

    def __call__(self, entry: dict[str, Any]) -> None:
        append_entry(self.path, self.model.model_validate(entry))


@dataclass
class SearchStack:
    search_alg: Searcher
    filtering: FilteringSearcher
    staged: StagedSearcher | None
    num_samples: int
    notes: list[str]

    def stage_of(self, trial_id: str) -> str | None:
        return self.staged.stage_of.get(trial_id) if self.staged else None


def budget(space: SearchSpace, search: str, samples: int | None) -> tuple[int, str | None]:
    """The trials to run and, when the space sized them, the line that says so."""
    if samples is not None:
        return samples, None
    if strategy(search).exhaustive:
        return space.size, f"budget: {space.size} trials, every point of the grid"
    sized = sized_budget(space)
    return sized.trials, f"budget: {sized.trials} trials, sized from the space ({sized.why})"


def build_search(space: SearchSpace, objective: Objective, *, search: str, stage_search: str,
                 samples: int | None, seed: int, failure_aware: bool, max_concurrent: int,
                 out_dir: Path | None, points: list[dict[str, Any]] | None = None,
                 study: Study | None = None, weights: WeightPlan | None = None,
                 identity: Identity | None = None, refusal: Refusal | None = None,
                 workload: str | None = None, resolved: Resolved | None = None,
                 nodes: int = 1) -> SearchStack:
    """The stack ``run`` searches with (and ``plan`` previews). ``out_dir``: where the
    stack writes what it rejects and each stage's winner (None: nowhere, for a preview);
    ``study``: where Optuna keeps its study (None: in memory); ``weights``: which weights
    each stage's trials load (a staged search adds them per stage; any other search has one
    stage, so its space pins them); ``identity``: when two configurations are one point
    (default: SGLang's known rules, keys.alike_key); ``refusal``: the workload's own checks
    on the driver, a configuration they refuse is never launched (grid launches it to
    record it); ``workload``: its kind, for the time
    estimate printed with a budget sized from the space; ``resolved``: what the workload
    resolves a configuration to (the baseline's partners complete a refused suggestion);
    ``nodes``: the nodes each trial spans, for the time estimate."""
    notes: list[str] = []
    how = strategy(search)
    weights = weights or WeightPlan()
    stage_pins = weights.stage_pins()
    if not how.staged or points:
        space = space.with_pins(weights.pins(SEARCH))
        stage_pins = {}
    samples, sized = budget(space, search, samples)
    if sized and not points:
        took = estimate(samples, objective.rounds, workload, nodes)
        notes.append(sized + (f"; {took}" if took else "") + "; --samples N sets it")
    rejects = _JsonlLog(out_dir / REJECTED, Rejected) if out_dir is not None else None
    staged = None
    if points:
        baseline = space.baseline()
        given = [space.complete(p) for p in points]
        queue = [baseline, *(p for p in given if p != baseline)]
        fixed = FixedPoints(queue, ["baseline", *(f"point {i}" for i in range(1, len(queue)))],
                            objective.search_metric, objective.mode)
        filtering = FilteringSearcher(fixed, space, pass_invalid=True,
                                      on_reject=rejects, identity=identity, refusal=refusal)
        notes.append(f"evaluating {len(queue)} given configurations (baseline first)")
        return SearchStack(ConcurrencyLimiter(filtering, max_concurrent=max_concurrent),
                           filtering, None, len(queue), notes)
    if how.staged:
        staged = StagedSearcher(space, samples, objective.rounds,
                                _StageInner(stage_search, objective, study), seed,
                                objective.search_metric, objective.mode,
                                out_dir / STAGES_JSON if out_dir is not None else None,
                                stage_pins)
        inner: Searcher = staged
        if not space.stages:
            notes.append(f"{space.name} defines no stages: one stage with every knob")
    memory = FailureMemory(space.baseline()) if failure_aware else None
    if search == AUTO:
        inner = AutoSearcher(space, objective.rounds, seed, objective.search_metric,
                             objective.mode, memory)
    elif not how.staged:
        inner = leaf_searcher(search, space, objective, seed, study)
    if how.exhaustive and space.size > samples:
        notes.append(f"grid has {space.size} points; --samples {samples} runs the first "
                     f"{samples} (baseline first)")
    if how.exhaustive:
        samples = min(samples, space.size)
    filtering = FilteringSearcher(inner, space, memory=memory, pass_invalid=how.exhaustive,
                                  on_reject=rejects, identity=identity, refusal=refusal,
                                  resolved=resolved, budget=samples,
                                  on_complete=_JsonlLog(out_dir / COMPLETED, Completed)
                                  if out_dir is not None else None)
    limited = ConcurrencyLimiter(filtering, max_concurrent=max_concurrent)
    return SearchStack(limited, filtering, staged, samples, notes)


def build_scheduler(name: str, objective: Objective, reduction_factor: int = 3,
                    spread: float = 0.0) -> TrialScheduler:
    """Early stopping on the per-round metric (reported under one name every round).
    ASHA keeps the top 1/``reduction_factor`` at each rung (rounds 1, rf, rf^2, ...); with a
    launch-to-launch ``spread``, a trial within it of the rung's best goes on (TiedASHA)."""
    if name == "asha" and spread > 0:
        return TiedASHA(spread=spread, time_attr="round", metric_key=objective.search_metric,
                        mode=objective.mode, max_t=objective.rounds, grace_period=1,
                        reduction_factor=reduction_factor)
    if name == "asha":
        return ASHAScheduler(time_attr="round", max_t=objective.rounds, grace_period=1,
                             reduction_factor=reduction_factor)
    if name == "median":
        return MedianStoppingRule(time_attr="round", grace_period=1, min_samples_required=3)
    return FIFOScheduler()


def proposals(stack: SearchStack, count: int) -> list[tuple[str, dict[str, Any]]]:
    """What the stack would launch, in order, before any result is known: each proposal is
    told it failed (no measurement), so a staged search keeps the baseline's values as every
    earlier stage's winner and Optuna proposes from its prior. Used by ``servetune plan``."""
    out: list[tuple[str, dict[str, Any]]] = []
    searcher = stack.filtering
    for index in range(count):
        trial_id = f"plan_{index:05d}"
        config = searcher.suggest(trial_id)
        if config is None or config == Searcher.FINISHED or not isinstance(config, dict):
            break
        searcher.on_trial_complete(trial_id, error=True)  # ended, unmeasured
        out.append((trial_id, dict(config)))
    return out
