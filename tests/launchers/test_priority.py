"""launchers.priority: a trial's server runs at its raylet's niceness, not Ray's +15."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launchers import priority

ROOT = Path(__file__).resolve().parents[2]
CHILD = ("import os; os.nice(5); from launchers.priority import match_parent_priority as m; "
         "w = m(); print(os.getpriority(os.PRIO_PROCESS, 0)); print(w)")


def test_a_worker_niced_below_its_parent_moves_back_or_says_why() -> None:
    parent = os.getpriority(os.PRIO_PROCESS, 0)
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    nice, warning = out.stdout.splitlines()
    try:  # the test's own right to raise a priority decides which branch is right
        os.setpriority(os.PRIO_PROCESS, 0, parent)
        allowed = os.geteuid() == 0
    except PermissionError:
        allowed = False
    if allowed:
        assert (int(nice), warning) == (parent, "None")
    else:
        assert int(nice) == parent + 5 and "RAY_worker_niceness=0" in warning


def test_refused_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getpriority", lambda *_: 15)

    def refuse(*_: object) -> None:
        raise PermissionError

    monkeypatch.setattr(os, "setpriority", refuse)
    warning = priority.match_parent_priority()
    assert warning is not None and "niceness 15" in warning


def test_not_below_the_parent_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(os, "getpriority", lambda *_: -20)
    monkeypatch.setattr(os, "setpriority", lambda *a: calls.append(a))
    assert priority.match_parent_priority() is None and calls == []
