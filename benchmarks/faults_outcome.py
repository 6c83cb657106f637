"""What the fault matrix (benchmarks/faults.py) records of one fault in one run, and the
checks every scenario shares: which trials that ended before the fault results.csv lost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launchers.process import Marked
from simulator.runs import Experiment


@dataclass
class Outcome:
    """One fault, one run."""

    fault: str
    expected: str  # the FailureKind (or trial status; a|b: either) the faulty trial ends with
    recorded: str = "-"
    leaked: list[Marked] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    cleanup_s: float | None = None
    problems: list[str] = field(default_factory=list)
    log: str = ""
    prefix: str = ""  # the experiment's marker prefix

    @property
    def ok(self) -> bool:
        return (not self.leaked and not self.lost and self.recorded in self.expected.split("|")
                and not self.problems)

    def explain(self) -> str:
        return (f"{self.fault}: recorded {self.recorded!r} (expected {self.expected!r}), "
                f"leaked {self.leaked}, lost {self.lost}, problems {self.problems}\n{self.log}")


Scenario = Callable[[Path, Path], list[Outcome]]
TIMEOUT = 480.0  # a safety net: a run on a loaded box takes minutes


def lost(exp: Experiment, before: list[str]) -> list[str]:
    """Of the trials that ended normally (``before``), those missing from results.csv or not
    marked finished there."""
    try:
        table = exp.table()
    except FileNotFoundError:
        return list(before)
    rows = {str(r["trial_id"]): r for _, r in table.iterrows()}
    return [t for t in before
            if t not in rows or rows[t]["status"] not in ("ok", "stopped") or rows[t]["rounds"] < 1]


def ended_ok(exp: Experiment) -> list[str]:
    return exp.finished_ok()
