"""The fault matrix of issue 5, each fault twice: `servetune run` as a subprocess with real
Ray and the stand-in server, faults injected (benchmarks/faults.py holds the scenarios).

For every fault: no process carrying the experiment's marker is left once servetune has
returned; every trial that finished before the fault is in results.csv afterwards; the
faulty trial carries the right FailureKind (or status). The six trial-level faults share
one experiment per repeat, one trial (and server) each; the port, SIGINT and SIGKILL faults
get experiments of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks import faults
from launchers.process import marked_processes

pytestmark = pytest.mark.integration

REPEATS = (1, 2)


class Matrix:
    """Each (scenario, repeat) runs once, on first use, whatever test asks first."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, int], list[faults.Outcome]] = {}

    def outcome(self, fault: str, scenario: str, repeat: int) -> faults.Outcome:
        key = (scenario, repeat)
        if key not in self.done:
            self.done[key] = faults.run_scenario(scenario)
        return next(o for o in self.done[key] if o.fault == fault)


@pytest.fixture(scope="module")
def matrix() -> Iterator[Matrix]:
    yield Matrix()


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize(("fault", "scenario"), faults.ROWS, ids=[r for r, _ in faults.ROWS])
def test_fault(matrix: Matrix, fault: str, scenario: str, repeat: int) -> None:
    o = matrix.outcome(fault, scenario, repeat)
    assert not o.leaked, f"marked processes left after servetune returned\n{o.explain()}"
    assert not o.lost, f"finished trials missing from results.csv\n{o.explain()}"
    assert o.recorded in o.expected.split("|"), o.explain()
    assert not o.problems, o.explain()
    assert o.cleanup_s is not None, o.explain()


def test_nothing_marked_is_left_by_the_matrix(matrix: Matrix) -> None:
    """Later too: no process of any experiment run here came back or lingered."""
    prefixes = {o.prefix for outcomes in matrix.done.values() for o in outcomes if o.prefix}
    assert prefixes
    left = [m for p in sorted(prefixes) for m in marked_processes(p)]
    assert left == []
