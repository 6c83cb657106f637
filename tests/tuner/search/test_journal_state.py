"""Search state from the journal, no pickle: a searcher built afresh and told the journal's
finished trials (tuner.run.replay, as ``--resume`` does) proposes the same next points as the
one that ran without interruption; Ray's checkpoint of it is a JSON marker."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from launchers.failures import Failure
from search_spaces.space import SearchSpace
from tuner.record.files import JOURNAL, append_jsonl
from tuner.run.replay import replay, search_state
from tuner.search.build import SearchStack, build_search
from tuner.spec import Objective

SPACE = SearchSpace(name="t", domains={
    "NCCL_BUFFSIZE": (None, 1 << 20, 1 << 21, 1 << 22),
    "NCCL_NTHREADS": (None, 64, 128, 256),
    "NCCL_PROTO": (None, "LL", "LL128", "Simple")})
OBJECTIVE = Objective("tok_s", "max", 2)
BUDGET, CUT = 14, 8  # trials in all, and those the journal holds when the run is cut short
KIND = "graph_capture"


def _score(config: dict[str, Any]) -> float | None:
    """LL128 crashes; the rest score by buffer and threads, which interact."""
    if config["NCCL_PROTO"] == "LL128":
        return None
    size = (config["NCCL_BUFFSIZE"] or 1 << 21) >> 20
    threads = (config["NCCL_NTHREADS"] or 128) // 64
    return 100.0 + 10 * size + 7 * threads - 3 * abs(size - threads) \
        + (5.0 if config["NCCL_PROTO"] == "Simple" else 0.0)


def _stack(search: str, points: list[dict[str, Any]] | None = None) -> SearchStack:
    return build_search(SPACE, OBJECTIVE, search=search, stage_search="random",
                        samples=BUDGET, seed=3, failure_aware=True, max_concurrent=1,
                        out_dir=None, points=points)


def _run(stack: SearchStack, first: int, last: int,
         journal: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Trials ``first`` to ``last - 1`` as the experiment runs them one at a time (each ends,
    then the recorder tells the failure memory); ``journal`` gets their events."""
    searcher, proposed = stack.filtering, []
    for index in range(first, last):
        tid = f"t{index:02d}"
        config = searcher.suggest(tid)
        if not isinstance(config, dict):
            break
        proposed.append(config)
        value = _score(config)
        events: list[dict[str, Any]] = [{"event": "start", "trial_id": tid, "config": config}]
        if value is None:
            searcher.on_trial_complete(tid, error=True)
            searcher.record_outcome(tid, config, KIND)
            events.append({"event": "end", "trial_id": tid, "status": "failed",
                           "failure": {"kind": KIND, "message": "crashed"}})
        else:
            for r in range(1, OBJECTIVE.rounds + 1):
                searcher.on_trial_result(tid, {"tok_s": value, "round": r,
                                               "training_iteration": r})
                events.append({"event": "result", "trial_id": tid, "tok_s": value, "round": r})
            searcher.on_trial_complete(tid, {"tok_s": value, "round": OBJECTIVE.rounds,
                                             "training_iteration": OBJECTIVE.rounds})
            searcher.record_outcome(tid, config, None)
            events.append({"event": "end", "trial_id": tid, "status": "ok"})
        if journal is not None:
            journal.extend(events)
    return proposed


class _Watch:
    """The environment watch's part in a resume: each replayed outcome to the memory."""

    def __init__(self, stack: SearchStack) -> None:
        self.stack = stack

    def observe(self, trial_id: str, config: Any, failure: Failure | None) -> None:
        self.stack.filtering.record_outcome(trial_id, config, failure.kind if failure else None)


@pytest.mark.parametrize("search", ["auto", "random", "grid", "staged", "optuna", "points"])
def test_a_searcher_rebuilt_from_the_journal_proposes_what_the_unbroken_one_did(
        tmp_path: Path, search: str) -> None:
    points = [{"NCCL_PROTO": p, "NCCL_BUFFSIZE": b} for p in ("LL", "LL128", "Simple")
              for b in SPACE.domains["NCCL_BUFFSIZE"][1:]] if search == "points" else None
    kind = "random" if points else search
    unbroken = _stack(kind, points)
    journal: list[dict[str, Any]] = []
    before = _run(unbroken, 0, CUT, journal)
    after = _run(unbroken, CUT, BUDGET)
    assert after, "the unbroken run goes on past the cut"
    for event in journal:
        append_jsonl(tmp_path / JOURNAL, event)
    resumed = _stack(kind, points)
    assert replay(search_state(tmp_path), resumed.filtering, _Watch(resumed)) == []
    assert _run(resumed, CUT, BUDGET) == after
    assert resumed.filtering.counts() == unbroken.filtering.counts()
    assert resumed.filtering.scores == unbroken.filtering.scores
    assert len(before) == CUT


@pytest.mark.parametrize("search", ["auto", "random", "staged"])
def test_rays_checkpoint_of_the_searcher_is_a_marker(tmp_path: Path, search: str) -> None:
    stack = _stack(search)
    _run(stack, 0, 4)
    stack.search_alg.save(str(tmp_path / "searcher"))
    marker = json.loads((tmp_path / "searcher").read_text())
    assert "journal" in marker["state"]
    assert stack.search_alg.get_state()  # Ray's own limiter keeps its counts
    assert stack.filtering.get_state() == {}
    again = pickle.loads(pickle.dumps(stack.search_alg))  # Ray pickles it with the Tuner
    assert again.suggest("t04") == stack.search_alg.suggest("t04")
