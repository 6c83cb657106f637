"""Failure memory: which settings to stop launching, convicted on evidence only. Plain Python
(no Ray): rebuilt from the journal for reports, fed live by the recorder during a run.

A failed trial's culprit is among its settings; a setting that has run in a trial that
succeeded is cleared of it (the baseline's settings all ran first). A failure counts against
a setting when it is the only one of its configuration not cleared (two or more left: no
verdict yet, never a tie broken by name or by count; the failure is read again whenever
another trial succeeds). A setting is ruled out when the failures that count against it
have nothing else in common: one failure on the baseline (the same configuration with that
knob unset ran), or several whose other settings share none. So a setting that fails only
beside another one (a pair that crashes together) is never ruled out on its own, and a
bystander that two culprits fail beside is never convicted for them. A later success with a
ruled-out setting (a trial already running, a resumed run) clears it.

Every kind counts except those that say nothing about the configuration (a busy port or GPU,
a path the workload does not model). ``invalid_config`` is deterministic like a crash: one
failure on the baseline convicts. Kinds that can strike a good configuration by chance (a
timeout, a hang, a crash in the middle of a benchmark) need two failures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from search_spaces.knobs import Value, without_weights

# Failure kinds that say nothing about the configuration itself.
ENVIRONMENTAL = frozenset({"port_busy", "gpu_busy", "not_modelled", "node_lost"})
# Failure kinds a good configuration can meet by chance: two are needed to convict.
FLAKY = frozenset({"startup_timeout", "watchdog_hang", "benchmark_hang", "crashed_mid_benchmark"})

Setting = tuple[str, str]  # (knob, value as JSON)


def _setting(name: str, value: Value) -> Setting:
    return name, json.dumps(value)


def _show(setting: Setting) -> str:
    value = json.loads(setting[1])
    return f"{setting[0]}={'unset' if value is None else value}"


@dataclass
class Failed:
    trial: str
    kind: str
    settings: frozenset[Setting]  # the configuration's settings besides the baseline's


@dataclass
class Verdict:
    """One ruled-out setting with its evidence."""

    setting: Setting
    kind: str
    trials: list[str]  # the failures that convict it
    ran: dict[str, str] = field(default_factory=dict)  # their other settings -> a trial they ran in
    paired: str | None = None  # a trial that ran the same configuration but this knob's value

    def why(self) -> str:
        if self.paired:
            return f"the same configuration with another {self.setting[0]} ran in {self.paired}"
        return "the failures share no other setting; their other settings ran: " + ", ".join(
            f"{s} in {t}" for s, t in self.ran.items())

    def text(self) -> str:
        return f"{_show(self.setting)}: {self.kind} in {', '.join(self.trials)} ({self.why()})"


class FailureMemory:
    """Failures and successes per setting; what is ruled out, and why."""

    def __init__(self, never: Mapping[str, Value]) -> None:
        self.never = dict(never)  # the baseline: its settings are never suspects
        self.failures: list[Failed] = []
        self.ran: dict[Setting, str] = {}  # setting -> the first trial it succeeded in
        self.successes: list[tuple[str, frozenset[Setting]]] = []
        self._verdicts: list[Verdict] | None = None  # cache, rebuilt after each record

    def _settings(self, config: Mapping[str, Value]) -> frozenset[Setting]:
        return frozenset(_setting(n, v) for n, v in without_weights(config).items()
                         if not (n in self.never and self.never[n] == v))

    def record(self, config: Mapping[str, Value], trial_id: str, kind: str | None) -> None:
        """``kind`` None: the trial ran fine."""
        if kind in ENVIRONMENTAL:
            return
        settings = self._settings(config)
        self._verdicts = None
        if kind is None:
            self.successes.append((trial_id, settings))
            for setting in settings:
                self.ran.setdefault(setting, trial_id)
        elif all(f.trial != trial_id for f in self.failures):
            self.failures.append(Failed(trial_id, kind, settings))

    # ------------------------------------------------------------ verdicts
    def verdicts(self) -> list[Verdict]:
        if self._verdicts is not None:
            return self._verdicts
        against: dict[tuple[Setting, str], list[Failed]] = {}
        for failed in self.failures:
            left = [s for s in failed.settings if s not in self.ran]
            if len(left) == 1:
                against.setdefault((left[0], failed.kind), []).append(failed)
        verdicts = []
        for (setting, kind), failures in against.items():
            common = frozenset.intersection(*(f.settings - {setting} for f in failures))
            if common or len(failures) < (2 if kind in FLAKY else 1):
                continue
            alone = next((f for f in failures if f.settings == {setting}), None)
            paired = None if alone is None else next(
                (t for t, ok in self.successes if all(s[0] == setting[0] for s in ok)), None)
            ran = {_show(s): self.ran[s] for f in failures for s in sorted(f.settings)
                   if s != setting}
            verdicts.append(Verdict(setting, kind, [f.trial for f in failures], ran, paired))
        self._verdicts = verdicts
        return verdicts

    def ruled_out(self, config: Mapping[str, Value]) -> list[str]:
        """Why ``config`` is not to be launched (empty: it may be)."""
        settings = self._settings(config)
        return [v.text() for v in self.verdicts() if v.setting in settings]

    def evidence(self) -> list[dict[str, Any]]:
        """Every setting ruled out now, with the failing trials and the evidence."""
        return [{"knob": v.setting[0], "value": json.loads(v.setting[1]), "kind": v.kind,
                 "trials": list(v.trials), "evidence": v.text(), "why": v.why(),
                 **({"paired": v.paired} if v.paired else {}), "ran": dict(v.ran)}
                for v in self.verdicts()]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_verdicts": None}

    @classmethod
    def replay(cls, never: Mapping[str, Value], outcomes: Iterable[tuple[str, Mapping[str, Value],
                                                                            str | None]]
               ) -> FailureMemory:
        """The memory a run built, from its trials' outcomes (trial id, config, failure kind
        or None) in the order they ended."""
        memory = cls(never)
        for trial_id, config, kind in outcomes:
            memory.record(config, trial_id, kind)
        return memory
