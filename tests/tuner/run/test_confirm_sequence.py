"""The confirm stage's launches in sequence (run_sequence), with Ray's fit and the results
table stubbed: each launch's outcome comes from a script. A launch lost to its environment (a
busy port) is made again and the candidate judged on the relaunch; a crash is the
candidate's own and ends its launches; the order alternates, reversed every other round."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from tuner.decide.sequential import Plan, compare
from tuner.record.rows import ResultRow, rows_of
from tuner.run import confirm
from tuner.search.adaptive import AdaptivePoints

Outcome = tuple[str, float | None, str | None]  # status, score, failure kind
POINTS = [{"NCCL_ALGO": None}, {"NCCL_ALGO": "Tree"}]
LABELS = ["baseline", "top 1"]


def _setup(tmp_path: Path) -> Any:
    space = SimpleNamespace(baseline=lambda: {"NCCL_ALGO": None})
    return SimpleNamespace(out_dir=tmp_path, objective=SimpleNamespace(mode="max"),
                           space=space, spec=None)


def _drive(monkeypatch: pytest.MonkeyPatch, script: Callable[[int, int], Outcome]
           ) -> list[tuple[int, str]]:
    """Stubs: ``_fit`` asks the searcher for launches until FINISHED, each launch's outcome
    from ``script(point, launch number of that point)``; ``_rows`` shows them."""
    rows: dict[str, Outcome] = {}
    launched: list[tuple[int, str]] = []

    def table(*_: Any, **__: Any) -> list[ResultRow]:
        return rows_of(pd.DataFrame([{"trial_id": t, "status": s, "score": v, "failure_kind": k}
                                     for t, (s, v, k) in rows.items()]))

    def fit(setup: Any, spec: Any, resources: Any, slots: int, searcher: AdaptivePoints,
            samples: int, *, name: str, tags: Mapping[str, Any]) -> bool:
        for n in itertools.count():
            tid = f"t{n:02d}"
            if searcher.suggest(tid) is Searcher_FINISHED or n >= samples:
                return False
            point = searcher.assigned[tid]
            label = searcher.label_of(tid) or ""
            launched.append((point, label))
            rows[tid] = script(point, sum(1 for p, _ in launched if p == point))
        return False

    monkeypatch.setattr(confirm, "_rows", table)
    monkeypatch.setattr(confirm, "_fit", fit)
    return launched


Searcher_FINISHED = AdaptivePoints.FINISHED


def _run(tmp_path: Path, plan: Plan) -> confirm.Batch:
    return confirm.run_sequence(_setup(tmp_path), None, {}, 1, POINTS, LABELS, plan,  # type: ignore[arg-type]
                                name="confirm", tags={"phase": "confirm"})


def test_a_clear_winner_is_decided_at_the_first_look_in_alternating_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scores = {0: [100.0, 104.0, 98.0], 1: [150.0, 147.0, 152.0]}
    launched = _drive(monkeypatch, lambda p, k: ("ok", scores[p][k - 1], None))
    batch = _run(tmp_path, Plan(cap=10))
    assert [p for p, _ in launched] == [0, 1, 1, 0, 0, 1]  # B c | c B | B c
    assert launched[0][1] == "baseline 1/10" and launched[-1][1] == "top 1 3/10"
    assert batch.stopped == "every candidate decided" and not batch.interrupted


def test_a_busy_port_is_launched_again_and_a_crash_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def script(point: int, k: int) -> Outcome:
        if point == 1 and k == 2:
            return ("failed", None, "port_busy")
        return ("ok", 150.0 + k if point else 100.0 + k, None)

    launched = _drive(monkeypatch, script)
    batch = _run(tmp_path, Plan(cap=10))
    assert [p for p, _ in launched].count(1) == 4  # three ok, one lost and made again
    assert batch.stopped == "every candidate decided"

    launched = _drive(monkeypatch, lambda p, k: ("failed", None, "crashed") if p == 1
                      else ("ok", 100.0, None))
    batch = _run(tmp_path, Plan(cap=10))
    assert [p for p, _ in launched] == [0, 1]  # the candidate's own failure ends it
    assert batch.stopped == "every candidate decided"


def test_the_stage_stops_at_the_cap_when_nothing_separates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    noise = [0.0, 9.0, -7.0, 4.0, -3.0, 8.0, -9.0, 2.0, 5.0, -4.0]
    launched = _drive(monkeypatch, lambda p, k: ("ok", 100.0 + noise[(k * 3 + p) % 10], None))
    batch = _run(tmp_path, Plan(cap=5))
    counts = [p for p, _ in launched]
    assert counts.count(0) <= 5 and counts.count(1) <= 5
    assert batch.stopped in ("every candidate decided", "the cap (5 launches each)")


def test_a_resumed_stage_goes_on_from_the_launches_it_had(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 a stage cut by the call's time limit started over on --resume: its ended
    launches now count (matched on phase, variant and config), an interrupted one is made
    again, and another phase's or variant's trials are not taken."""
    earlier = pd.DataFrame([
        {"trial_id": "e0", "phase": "confirm", "variant": None, "status": "ok", "score": 100.0},
        {"trial_id": "e1", "phase": "confirm", "variant": None, "status": "ok", "score": 150.0},
        {"trial_id": "e2", "phase": "confirm", "variant": None, "status": "interrupted",
         "score": None},
        {"trial_id": "e3", "phase": "search", "variant": None, "status": "ok", "score": 150.0},
        {"trial_id": "e4", "phase": "confirm", "variant": "no_speculative", "status": "ok",
         "score": 90.0}])
    ran = {"e0": POINTS[0], "e1": POINTS[1], "e2": POINTS[1], "e3": POINTS[1], "e4": POINTS[0]}
    monkeypatch.setattr(confirm, "_settings", lambda _: ran)
    monkeypatch.setattr(confirm, "_rows", lambda *_, **__: rows_of(earlier))
    assert confirm._ended_before(_setup(tmp_path), POINTS, {"phase": "confirm"}) == \
        {"e0": 0, "e1": 1}
    assert confirm._ended_before(_setup(tmp_path), POINTS, {"phase": "confirm",
                                                             "variant": "no_speculative"},
                                 never={0}) == {}
    assert confirm._ended_before(_setup(tmp_path), [POINTS[1], POINTS[0]],
                                 {"phase": "confirm", "variant": "no_speculative"},
                                 never={0}) == {"e4": 1}


def test_the_speculative_reference_launches_the_decided_settings_again_while_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One of the decided settings' three confirm launches came out slow (a loaded box): with
    them fixed at three, no number of reference launches could decide. Their side is launched
    again, each side by a run of its own workload and variant, until the rule decides; a
    resumed stage takes both sides' ended launches."""
    rows: dict[str, dict[str, Any]] = {}
    ran: dict[str, Mapping[str, Any]] = {}
    runs: list[tuple[str, str | None]] = []
    scores = {0: itertools.cycle([242.0, 238.0, 240.0]), 1: itertools.cycle([160.0, 163.0, 158.0])}

    def fit(setup: Any, spec: Any, resources: Any, slots: int, searcher: AdaptivePoints,
            samples: int, *, name: str, tags: Mapping[str, Any]) -> bool:
        runs.append((name, tags.get("variant")))
        while (tid := f"t{len(rows):02d}") and searcher.suggest(tid) is not Searcher_FINISHED:
            point = searcher.assigned[tid]
            ran[tid] = POINTS[point]
            rows[tid] = {"trial_id": tid, "status": "ok", "score": next(scores[point]), **tags}
        return False

    monkeypatch.setattr(confirm, "_rows", lambda *_, **__: rows_of(pd.DataFrame(
        list(rows.values()), columns=["trial_id", "status", "score", "phase", "variant"])))
    monkeypatch.setattr(confirm, "_settings", lambda _: ran)
    monkeypatch.setattr(confirm, "_fit", fit)
    plan = Plan(cap=6, two_sided=True)
    batch = confirm._alternate(_setup(tmp_path), ["with", "without"], {}, 1, POINTS, LABELS,
                               plan, [240.0, 236.0, 150.0])
    sides = [batch.assigned[t] for t in sorted(batch.assigned)]
    assert sides.count(0) >= 1 and sides.count(1) >= 3, sides
    assert [v for _, v in runs][:2] == ["no_speculative", "with_speculative"], runs
    assert all(rows[t]["variant"] == ("with_speculative" if p == 0 else "no_speculative")
               for t, p in batch.assigned.items())
    with_it = [240.0, 236.0, 150.0] + [rows[t]["score"] for t, p in batch.assigned.items()
                                       if p == 0]
    without = [rows[t]["score"] for t, p in batch.assigned.items() if p == 1]
    assert compare(without, with_it, "max", plan).verdict == "worse", (with_it, without)
    assert batch.stopped == "every candidate decided" and not batch.interrupted
    # Fixed at the three launches it had, the same reference stays open at the cap.
    assert compare([160.0, 163.0, 158.0] * 2, [240.0, 236.0, 150.0], "max", plan
                   ).verdict == "open"

    # Resumed: both sides' ended launches count, nothing is launched again.
    runs.clear()
    again = confirm._alternate(_setup(tmp_path), ["with", "without"], {}, 1, POINTS, LABELS,
                               plan, [240.0, 236.0, 150.0])
    assert again.assigned == batch.assigned and len(runs) == 1
