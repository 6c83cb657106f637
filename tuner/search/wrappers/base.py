"""The base of the search wrappers. Each wraps a searcher as Ray Tune's ConcurrencyLimiter and
Repeater do, passes Ray's calls on and adds one concern (filtering.py composes them). A
wrapper may decline a suggestion: it returns a ``Declined`` in its place, which the wrappers
above pass on (adding their own reasons) and the re-asking wrapper (reask.py) records, tells
the strategy and asks again.

The chain's own calls, passed down to the strategy: ``launch`` (a suggestion that will run,
or a point a wrapper launched itself), ``admits`` (whether a point would pass every wrapper,
asked without a suggestion), and the strategy's optional hooks ``not_launched`` and
``completed``. No state is saved: a resumed run replays the journal into a fresh chain
(tuner.run.replay), so Ray's checkpoint keeps nothing of a wrapper."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from ray.tune.search import Searcher

from tuner.search.keys import Config

W = TypeVar("W", bound="Wrapper")


@dataclass
class Declined:
    """A suggestion a wrapper will not launch: refused (``invalid``), ruled out by the failure
    memory (``ruled_out``), or a repeat of a launched point (``repeat``: the strategy is told
    ``answer``, its measurement, or ``failed``, that it ended unmeasured, or nothing yet)."""

    config: Config
    invalid: list[str] = field(default_factory=list)
    ruled_out: list[str] = field(default_factory=list)
    repeat: bool = False
    repeat_of: str | None = None  # the trial that ran it first
    answer: dict[str, float] | None = None
    failed: bool = False


class Wrapper(Searcher):
    """Passes every call on to ``searcher``; a subclass overrides the calls its concern needs."""

    def __init__(self, searcher: Searcher) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return bool(ok)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return bool(self.searcher.set_max_concurrency(max_concurrent))

    def suggest(self, trial_id: str) -> Any:
        return self.searcher.suggest(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list | None = None
                            ) -> None:
        self.searcher.add_evaluated_point(parameters, value, error, pruned, intermediate_values)

    def launch(self, trial_id: str, config: Config, asked: str | None) -> None:
        """``config`` runs as ``trial_id``: the strategy's suggestion for ``asked``, or (None)
        a point a wrapper chose itself."""
        if isinstance(self.searcher, Wrapper):
            self.searcher.launch(trial_id, config, asked)

    def admits(self, config: Config) -> bool:
        """Whether every wrapper below would let ``config`` run (nothing recorded)."""
        return not isinstance(self.searcher, Wrapper) or self.searcher.admits(config)

    def not_launched(self, trial_id: str) -> None:
        """The strategy's hook (staged: each stage's budget): its suggestion for ``trial_id``
        was answered or refused instead of launched."""
        hook = getattr(self.searcher, "not_launched", None)
        if callable(hook):
            hook(trial_id)

    def completed(self, trial_id: str, config: Config) -> None:
        """The strategy's hook: its suggestion for ``trial_id`` runs completed as ``config``."""
        hook = getattr(self.searcher, "completed", None)
        if callable(hook):
            hook(trial_id, config)

    def find(self, kind: type[W]) -> W | None:
        """The wrapper of ``kind`` in this chain (this one or one below), if any."""
        searcher: Searcher = self
        while isinstance(searcher, Wrapper):
            if isinstance(searcher, kind):
                return searcher
            searcher = searcher.searcher
        return None

    # Ray saves each wrapper's get_state beside the strategy's checkpoint: nothing here.
    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)
