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

Where the space holds levers likely to change that kind of failure (failure_levers: memory
levers for an OOM, graph levers for a capture failure, ...), the failures must also differ in
them: a setting that failed only beside the baseline's memory fraction is a suspect
(``suspects``), not ruled out; the feasibility model retries it beside other values of those
levers.

Every kind counts except those that say nothing about the configuration (a busy port or GPU,
a path the workload does not model, a node lost). A failure read from a follower's log only
(a trial across nodes: ``nccl_error``, ``crashed`` or ``cuda_oom`` on a node of rank >= 1,
``launchers.failures.follower_placement``) is held back, as environmental, until a failure of
that kind repeats on another placement (another set of nodes) with a setting in common: one
node's fabric or memory rules nothing out. ``invalid_config`` is deterministic like a crash: one
failure on the baseline convicts. Kinds that can strike a good configuration by chance (a
timeout, a hang, a crash in the middle of a benchmark) need two failures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from search_spaces.knobs import Value, without_weights
from tuner.output.ruled_out import evidence_lines
from tuner.search.failure_levers import extreme, relevant

__all__ = ["FailureMemory", "Suspect", "Verdict", "evidence_lines"]

# Failure kinds that say nothing about the configuration itself.
ENVIRONMENTAL = frozenset({"port_busy", "gpu_busy", "not_modelled", "node_lost"})
# Failure kinds a good configuration can meet by chance: two are needed to convict.
FLAKY = frozenset({"startup_timeout", "watchdog_hang", "benchmark_hang", "crashed_mid_benchmark"})

Setting = tuple[str, str]  # (knob, value as JSON)
# A finished trial: id, config, failure kind (None: it ran)[, follower-only placement].
Outcome = (tuple[str, Mapping[str, Value], str | None]
           | tuple[str, Mapping[str, Value], str | None, str | None])


def _setting(name: str, value: Value) -> Setting:
    return name, json.dumps(value)


def _show(setting: Setting) -> str:
    value = json.loads(setting[1])
    return f"{setting[0]}={'unset' if value is None else value}"


@dataclass
class Suspect:
    """A setting that failed beside one setting of the levers that matter for its kind only:
    retried beside others before any verdict."""

    setting: Setting
    kind: str
    trials: list[str]
    levers: tuple[str, ...]
    where: list[dict[str, Value]]  # the levers' values in each failure
    untried: dict[str, Value] = field(default_factory=dict)  # each lever's end not failed at

    @property
    def knob(self) -> str:
        return self.setting[0]

    @property
    def value(self) -> Value:
        value: Value = json.loads(self.setting[1])
        return value

    def why(self) -> str:
        beside = " and beside ".join(", ".join(f"{n}={'unset' if v is None else v}"
                                               for n, v in w.items()) for w in self.where)
        if self.untried:
            return (f"it failed beside {beside}, never at " + ", ".join(
                f"{n}={v}" for n, v in self.untried.items()) + f", likelier to mend {self.kind}")
        return (f"it failed only beside {beside}, not yet beside other values of "
                f"{', '.join(self.levers)}")

    def text(self) -> str:
        return (f"{_show(self.setting)}: {self.kind} in {', '.join(self.trials)}, suspect, "
                f"not ruled out ({self.why()})")


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
    levers: tuple[str, ...] = ()  # the space's levers that matter for the kind
    where: list[dict[str, Value]] = field(default_factory=list)  # their values per failure

    def why(self) -> str:
        if self.paired:
            text = f"the same configuration with another {self.setting[0]} ran in {self.paired}"
        else:
            text = "the failures share no other setting; their other settings ran: " + ", ".join(
                f"{s} in {t}" for s, t in self.ran.items())
        if self.levers:
            text += "; it failed beside " + " and beside ".join(
                ", ".join(f"{n}={'unset' if v is None else v}" for n, v in w.items())
                for w in self.where)
        return text

    def text(self) -> str:
        return f"{_show(self.setting)}: {self.kind} in {', '.join(self.trials)} ({self.why()})"


class FailureMemory:
    """Failures and successes per setting; what is ruled out, and why."""

    def __init__(self, never: Mapping[str, Value],
                 domains: Mapping[str, tuple[Value, ...]] | None = None) -> None:
        self.never = dict(never)  # the baseline: its settings are never suspects
        # the knobs searched and their values (the baseline's less its pins): where levers
        # can change; None: the baseline's knobs, values unknown
        self.domains = None if domains is None else dict(domains)
        self.failures: list[Failed] = []
        self.held: list[tuple[Failed, str]] = []  # follower-only failures and their placement
        self.ran: dict[Setting, str] = {}  # setting -> the first trial it succeeded in
        self.successes: list[tuple[str, frozenset[Setting]]] = []
        self._verdicts: list[Verdict] | None = None  # cache, rebuilt after each record
        self._suspects: list[Suspect] = []

    def _settings(self, config: Mapping[str, Value]) -> frozenset[Setting]:
        return frozenset(_setting(n, v) for n, v in without_weights(config).items()
                         if not (n in self.never and self.never[n] == v))

    def record(self, config: Mapping[str, Value], trial_id: str, kind: str | None,
               placement: str | None = None) -> None:
        """``kind`` None: the trial ran fine. ``placement``: the nodes of a failure read
        from a follower's log only (held back until it repeats on other nodes)."""
        if kind in ENVIRONMENTAL:
            return
        settings = self._settings(config)
        self._verdicts = None
        if kind is None:
            self.successes.append((trial_id, settings))
            for setting in settings:
                self.ran.setdefault(setting, trial_id)
        elif any(f.trial == trial_id for f in self.failures) or \
                any(f.trial == trial_id for f, _ in self.held):
            return
        elif placement is not None:
            self._hold(Failed(trial_id, kind, settings), placement)
        else:
            self.failures.append(Failed(trial_id, kind, settings))

    def _hold(self, failed: Failed, placement: str) -> None:
        """A follower-only failure counts once one of its kind, sharing a setting with it,
        was seen on another set of nodes (both count then); until then it is held."""
        again = [(f, p) for f, p in self.held if f.kind == failed.kind and p != placement
                 and f.settings & failed.settings]
        if not again:
            self.held.append((failed, placement))
            return
        self.held = [h for h in self.held if h not in again]
        self.failures += [f for f, _ in again] + [failed]

    # ------------------------------------------------------------ verdicts
    def verdicts(self) -> list[Verdict]:
        if self._verdicts is not None:
            return self._verdicts
        against: dict[tuple[Setting, str], list[Failed]] = {}
        for failed in self.failures:
            left = [s for s in failed.settings if s not in self.ran]
            if len(left) == 1:
                against.setdefault((left[0], failed.kind), []).append(failed)
        verdicts, suspects = [], []
        for (setting, kind), failures in against.items():
            common = frozenset.intersection(*(f.settings - {setting} for f in failures))
            if common or len(failures) < (2 if kind in FLAKY else 1):
                continue
            levers = relevant(kind, setting[0], self.never if self.domains is None else self.domains)
            where = [self._where(f, levers) for f in failures]
            if levers and not self._differ(kind, levers, where):
                suspects.append(Suspect(setting, kind, [f.trial for f in failures], levers,
                                        where, self._untried(kind, levers, where)))
                continue
            alone = next((f for f in failures if f.settings == {setting}), None)
            paired = None if alone is None else next(
                (t for t, ok in self.successes if all(s[0] == setting[0] for s in ok)), None)
            ran = {_show(s): self.ran[s] for f in failures for s in sorted(f.settings)
                   if s != setting}
            verdicts.append(Verdict(setting, kind, [f.trial for f in failures], ran, paired,
                                    levers, where if levers else []))
        self._verdicts, self._suspects = verdicts, suspects
        return verdicts

    def _differ(self, kind: str, levers: tuple[str, ...], where: list[dict[str, Value]]) -> bool:
        """Whether the failures differ in the levers that matter: in two contexts at least,
        and each lever the table points one way for the kind tried at that end (an OOM at
        the smallest memory fraction too)."""
        if len({json.dumps(w, sort_keys=True) for w in where}) < 2:
            return False
        return all(end is None or end in {w[n] for w in where}
                   for n in levers if self.domains is not None and n in self.domains
                   for end in [extreme(kind, n, self.domains[n])])

    def _untried(self, kind: str, levers: tuple[str, ...], where: list[dict[str, Value]]
                 ) -> dict[str, Value]:
        """The end the table points to, of each lever whose failures never reached it."""
        if self.domains is None or len({json.dumps(w, sort_keys=True) for w in where}) < 2:
            return {}
        return {n: end for n in levers if n in self.domains
                if (end := extreme(kind, n, self.domains[n])) is not None
                and end not in {w[n] for w in where}}

    def _where(self, failed: Failed, levers: tuple[str, ...]) -> dict[str, Value]:
        given = {n: json.loads(v) for n, v in failed.settings}
        return {n: given.get(n, self.never.get(n)) for n in levers}

    def suspects(self) -> list[Suspect]:
        """Settings that failed, each time beside the same values of the levers that matter
        for the kind: not ruled out, retried beside others (feasibility.py)."""
        self.verdicts()
        return self._suspects

    def ruled_out(self, config: Mapping[str, Value]) -> list[str]:
        """Why ``config`` is not to be launched (empty: it may be)."""
        settings = self._settings(config)
        return [v.text() for v in self.verdicts() if v.setting in settings]

    def evidence(self) -> list[dict[str, Any]]:
        """Every setting ruled out now, with the failing trials and the evidence."""
        return [{"knob": v.setting[0], "value": json.loads(v.setting[1]), "kind": v.kind,
                 "trials": list(v.trials), "evidence": v.text(), "why": v.why(),
                 **({"paired": v.paired} if v.paired else {}), "ran": dict(v.ran),
                 **({"levers": list(v.levers), "where": v.where} if v.levers else {})}
                for v in self.verdicts()]

    def suspected(self) -> list[dict[str, Any]]:
        """Every suspect now (failed, not ruled out), with where it failed and why that is no
        verdict: suspects.json's entries."""
        return [{"knob": s.knob, "value": s.value, "kind": s.kind, "trials": list(s.trials),
                 "levers": list(s.levers), "where": s.where, "evidence": s.text(),
                 "why": s.why(), **({"untried": s.untried} if s.untried else {})}
                for s in self.suspects()]

    def lines(self) -> list[str]:
        """What was ruled out, where and why, and what is only suspect: lines for a report."""
        return [*(v.text() for v in self.verdicts()), *(s.text() for s in self.suspects())]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_verdicts": None, "_suspects": []}

    @classmethod
    def replay(cls, never: Mapping[str, Value], outcomes: Iterable[Outcome],
               domains: Mapping[str, tuple[Value, ...]] | None = None) -> FailureMemory:
        """The memory a run built, from its trials' outcomes (trial id, config, failure kind
        or None[, follower-only placement]) in the order they ended; ``domains``: the
        space's, as the run had them."""
        memory = cls(never, domains)
        for trial_id, config, kind, *placement in outcomes:
            memory.record(config, trial_id, kind, placement[0] if placement else None)
        return memory

