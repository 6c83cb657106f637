"""The confirm stage launches once more a point whose launch failed for a reason outside its
configuration (a busy port or GPU): otherwise one such failure leaves its candidate a launch
short and the decision unconfirmed (run_points and the results table stubbed: no Ray)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from search_spaces.knobs import Value
from tuner.run import confirm

POINTS = [{"NCCL_ALGO": "Tree"}, {"NCCL_ALGO": None}, {"NCCL_ALGO": "Tree"}, {"NCCL_ALGO": None}]
LABELS = ["top 1 1/2", "baseline 1/2", "top 1 2/2", "baseline 2/2"]


def _setup(tmp_path: Path) -> Any:
    space = SimpleNamespace(baseline=lambda: {"NCCL_ALGO": None})
    return SimpleNamespace(out_dir=tmp_path, objective=None, space=space, spec=None)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[Mapping[str, Value]], str]]:
    calls: list[tuple[list[Mapping[str, Value]], str]] = []

    def run_points(setup: Any, spec: Any, resources: Any, slots: int,
                   points: Sequence[Mapping[str, Value]], labels: Sequence[str], *, name: str,
                   tags: Mapping[str, Any]) -> confirm.Batch:
        calls.append((list(points), name))
        return confirm.Batch({f"r{i}": i for i in range(len(points))})

    monkeypatch.setattr(confirm, "run_points", run_points)
    return calls


def _table(kinds: dict[str, str | None]) -> pd.DataFrame:
    return pd.DataFrame({"trial_id": list(kinds), "failure_kind": list(kinds.values())})


def test_a_busy_port_is_launched_again_and_judged_on_the_relaunch(
        tmp_path: Path,
        runs: list[tuple[list[Mapping[str, Value]], str]]) -> None:
    df = _table({"a": None, "b": None, "c": None, "d": "port_busy"})
    batch = confirm.Batch({"a": 0, "b": 1, "c": 2, "d": 3})
    lines: list[str] = []
    judged, relaunched = confirm._relaunch_environmental(
        _setup(tmp_path), {}, 1, POINTS, LABELS, batch, df, lines.append)
    assert runs == [([POINTS[3]], "confirm-again")]
    assert judged.assigned == {"a": 0, "b": 1, "c": 2, "r0": 3}
    assert relaunched == [{"trial_id": "d", "kind": "port_busy"}]
    assert "d: port_busy" in lines[0] and "launched once more" in lines[0]


def test_a_crash_or_an_unmodelled_path_recurs_and_is_not_relaunched(
        tmp_path: Path,
        runs: list[tuple[list[Mapping[str, Value]], str]]) -> None:
    df = _table({"a": "graph_capture", "b": "not_modelled", "c": None, "d": None})
    batch = confirm.Batch({"a": 0, "b": 1, "c": 2, "d": 3})
    judged, relaunched = confirm._relaunch_environmental(
        _setup(tmp_path), {}, 1, POINTS, LABELS, batch, df, print)
    assert runs == [] and judged is batch and relaunched == []
