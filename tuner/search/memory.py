"""Failure memory: which knob values failed the same way, with the failing trials as
evidence, and which values to stop launching. Plain Python (no Ray): rebuilt from the journal
for reports, fed live by the recorder during a run."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from search_spaces.knobs import CATALOGUE, Value, without_weights

# Failure kinds that say nothing about the configuration itself.
ENVIRONMENTAL = {"invalid_config", "port_busy", "gpu_busy", "not_modelled", "node_lost"}


class FailureMemory:
    """Failures per (knob, value) and kind, and which values to stop launching.

    A value is a suspect once ``threshold`` trials with it failed the same way and no trial
    with it succeeded (unset and pinned values never are: every trial shares them). Two
    failing configs share bystander values by chance, so suspects explain each other away:
    the strongest suspect (most failures, then a value the catalogue flags as risky, e.g. a
    global NCCL_ALGO=Tree) is ruled out, and a weaker suspect whose failures it already
    explains is not. If the wrong one was picked, the real culprit fails a third time, becomes
    the strongest, and the bystander is cleared."""

    def __init__(self, never: Mapping[str, Value], threshold: int = 2) -> None:
        self.never = dict(never)
        self.threshold = threshold
        self.failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(
            lambda: defaultdict(list))
        self.successes: set[tuple[str, str]] = set()

    @staticmethod
    def _key(name: str, value: Value) -> tuple[str, str]:
        return name, json.dumps(value)

    def record(self, config: Mapping[str, Value], trial_id: str, kind: str | None) -> None:
        """``kind`` None: the trial ran fine."""
        if kind in ENVIRONMENTAL:
            return
        for name, value in without_weights(config).items():  # how it loaded is no setting
            if name in self.never and self.never[name] == value:
                continue
            key = self._key(name, value)
            if kind is None:
                self.successes.add(key)
            elif trial_id not in self.failures[key][kind]:
                self.failures[key][kind].append(trial_id)

    @staticmethod
    def _flagged(key: tuple[str, str]) -> bool:
        knob = CATALOGUE.get(key[0])
        return knob is not None and knob.warning(json.loads(key[1])) is not None

    def _ruled(self) -> dict[tuple[str, str], dict[str, list[str]]]:
        """(knob, value) -> {kind: failing trials} for every value ruled out now."""
        suspects = [(key, kind, trials) for key, kinds in self.failures.items()
                    if key not in self.successes
                    for kind, trials in kinds.items() if len(trials) >= self.threshold]
        suspects.sort(key=lambda s: (-len(s[2]), not self._flagged(s[0]), s[0]))
        explained: dict[str, set[str]] = defaultdict(set)
        ruled: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(dict)
        for key, kind, trials in suspects:
            if set(trials) <= explained[kind]:
                continue  # a stronger suspect already explains these failures
            explained[kind].update(trials)
            ruled[key][kind] = list(trials)
        return ruled

    def ruled_out(self, config: Mapping[str, Value]) -> list[str]:
        ruled = self._ruled()
        reasons = []
        for name, value in config.items():
            for kind, trials in ruled.get(self._key(name, value), {}).items():
                reasons.append(f"{name}={value}: {kind} in trials {', '.join(trials)}")
        return reasons

    def evidence(self) -> list[dict[str, Any]]:
        """Every value currently ruled out, with the failing trials."""
        return [{"knob": name, "value": json.loads(value), "kind": kind, "trials": trials}
                for (name, value), kinds in self._ruled().items()
                for kind, trials in kinds.items()]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["failures"] = {k: dict(v) for k, v in self.failures.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(
            lambda: defaultdict(list))
        for key, kinds in state["failures"].items():
            failures[key].update(kinds)
        self.__dict__.update({**state, "failures": failures})

    @classmethod
    def replay(cls, never: Mapping[str, Value], outcomes: Iterable[tuple[str, Mapping[str, Value],
                                                                            str | None]],
               threshold: int = 2) -> FailureMemory:
        """The memory a run built, from its trials' outcomes (trial id, config, failure kind
        or None) in the order they ended."""
        memory = cls(never, threshold)
        for trial_id, config, kind in outcomes:
            memory.record(config, trial_id, kind)
        return memory
