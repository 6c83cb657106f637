"""Resuming from the journal: which search trials count, and what a fresh searcher is told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from search_spaces.space import SearchSpace
from tuner.record.files import JOURNAL, append_jsonl
from tuner.run.replay import replay, search_state
from tuner.search.filtering import FilteringSearcher
from tuner.search.space_searcher import SpaceSearcher

SPACE = SearchSpace(name="t", domains={"NCCL_BUFFSIZE": (None, 1 << 20, 1 << 21, 1 << 22),
                                        "NCCL_NTHREADS": (None, 64, 128, 256)})


def _write(out: Path, events: list[dict[str, Any]]) -> None:
    for event in events:
        append_jsonl(out / JOURNAL, event)


def _trial(tid: str, config: dict[str, Any], score: float | None, *, phase: str | None = None,
           ended: bool = True) -> list[dict[str, Any]]:
    start = {"event": "start", "trial_id": tid, "config": config,
             **({"phase": phase} if phase else {})}
    if not ended:
        return [start, {"event": "result", "trial_id": tid, "tok_s": 1.0, "round": 1}]
    if score is None:
        return [start, {"event": "end", "trial_id": tid, "status": "failed",
                        "failure": {"kind": "crashed", "message": "x"}}]
    return [start, {"event": "result", "trial_id": tid, "tok_s": score, "round": 1},
            {"event": "end", "trial_id": tid, "status": "ok"}]


def _searcher() -> FilteringSearcher:
    return FilteringSearcher(SpaceSearcher(SPACE, "random", 0, "tok_s", "max"), SPACE)


def _propose(searcher: FilteringSearcher, trial_id: str) -> dict[str, Any]:
    config = searcher.suggest(trial_id)
    assert isinstance(config, dict)
    return config


def test_finished_trials_count_interrupted_and_confirm_trials_do_not(tmp_path: Path) -> None:
    _write(tmp_path, [*_trial("a", {"NCCL_BUFFSIZE": 1}, 10.0),
                      *_trial("b", {"NCCL_BUFFSIZE": 2}, None),
                      *_trial("c", {"NCCL_BUFFSIZE": 3}, 0.0, ended=False),
                      *_trial("k", {"NCCL_BUFFSIZE": 1}, 9.0, phase="confirm")])
    state = search_state(tmp_path)
    assert state.finished == ["a", "b"]
    assert state.interrupted == ["c"]
    assert state.line(6).endswith("2 of 6 search trials done; 1 interrupted, run again; 4 to run")


def test_a_trial_resumed_once_by_ray_counts_once(tmp_path: Path) -> None:
    config = _propose(_searcher(), "x")
    first, end = _trial("a", config, 10.0)[:2], _trial("a", config, 11.0)[1:]
    _write(tmp_path, [*first, *_trial("a", config, 0, ended=False)[:1], *end])
    state = search_state(tmp_path)
    assert state.finished == ["a"] and state.interrupted == []
    searcher = _searcher()
    assert replay(state, searcher) == []
    assert searcher.scores == {searcher._key(config): 11.0}  # its last end


def test_the_replayed_searcher_goes_on_where_the_killed_one_stopped(tmp_path: Path) -> None:
    """A seeded searcher proposes the same points again: replaying the first two finished
    trials leaves it proposing the third (the interrupted one) next, as an unbroken run."""
    unbroken = _searcher()
    proposals = []
    for i in range(4):
        proposals.append(_propose(unbroken, f"t{i}"))
        unbroken.on_trial_complete(f"t{i}", result={"tok_s": float(i)})
    _write(tmp_path, [*_trial("t0", proposals[0], 0.0), *_trial("t1", proposals[1], None),
                      *_trial("t2", proposals[2], 0.0, ended=False)])
    resumed = _searcher()
    notes = replay(search_state(tmp_path), resumed)
    assert notes == []
    assert _propose(resumed, "new") == proposals[2]
    assert resumed.scores == {resumed._key(proposals[0]): 0.0}  # measured
    assert resumed.failed == {resumed._key(proposals[1])}  # failed: never a measurement


def test_a_diverging_proposal_is_noted_and_told_nothing(tmp_path: Path) -> None:
    first = _propose(_searcher(), "x")
    other = next(v for v in SPACE.domains["NCCL_BUFFSIZE"] if v != first["NCCL_BUFFSIZE"])
    _write(tmp_path, _trial("t0", {**first, "NCCL_BUFFSIZE": other}, 1.0))
    searcher = _searcher()
    notes = replay(search_state(tmp_path), searcher)
    assert len(notes) == 1 and "t0" in notes[0]
    assert searcher.scores == {}


class Watch:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def observe(self, trial_id: str, config: Any, failure: Any) -> None:
        self.seen.append((trial_id, failure.kind.value if failure else None))


def test_the_watch_learns_each_outcome(tmp_path: Path) -> None:
    searcher = _searcher()
    a, b = _propose(searcher, "p"), _propose(searcher, "q")
    _write(tmp_path, [*_trial("t0", a, 3.0), *_trial("t1", b, None)])
    watch = Watch()
    replay(search_state(tmp_path), _searcher(), watch)
    assert watch.seen == [("t0", None), ("t1", "crashed")]
