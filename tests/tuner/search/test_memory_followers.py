"""A failure seen on a follower only (a node of rank >= 1 of a trial across nodes) rules
nothing out until it repeats on another set of nodes: one node's fabric hiccup or leftover
GPU memory says little about the configuration (tuner/search/memory.py)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from launchers.failures import Failure, FailureKind, follower_placement
from tests.tuner.search.test_memory import BACKEND, BASE
from tuner.decide.environment import EnvironmentCheck
from tuner.search.memory import FailureMemory

SYMM = {**BASE, BACKEND: "torch-symm-mem"}
AB, CD = "nodeA,nodeB", "nodeC,nodeD"  # two placements: different sets of nodes


def _ruled(memory: FailureMemory) -> list[tuple[str, Any]]:
    return sorted((e["knob"], e["value"]) for e in memory.evidence())


@pytest.mark.parametrize("kind", ["nccl_error", "crashed", "cuda_oom"])
def test_one_follower_only_failure_rules_nothing_out(kind: str) -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record(SYMM, "t1", kind, AB)
    assert _ruled(memory) == [] and memory.lines() == []
    assert memory.ruled_out(SYMM) == []
    # The same failure read from node 0 (or on one node) counts at once, as before: ruled
    # out, or a suspect where the space has levers for the kind (nccl_error: NCCL_PROTO).
    seen_on_node_0 = FailureMemory(BASE)
    seen_on_node_0.record(BASE, "t0", None)
    seen_on_node_0.record(SYMM, "t1", kind)
    assert [line.split(":")[0] for line in seen_on_node_0.lines()] == [
        f"{BACKEND}=torch-symm-mem"]


def test_it_counts_once_it_repeats_on_another_placement() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record(SYMM, "t1", "nccl_error", AB)
    memory.record({**SYMM, "NCCL_PROTO": "LL"}, "t2", "nccl_error", AB)  # the same nodes
    assert _ruled(memory) == []
    memory.record({**SYMM, "NCCL_NTHREADS": 128}, "t3", "crashed", CD)  # another kind
    assert _ruled(memory) == []
    memory.record({**BASE, "NCCL_PROTO": "LL"}, "t4", None)
    memory.record(SYMM, "t5", "nccl_error", CD)  # other nodes, a setting in common
    assert _ruled(memory) == [(BACKEND, "torch-symm-mem")]
    [entry] = memory.evidence()
    assert set(entry["trials"]) == {"t1", "t2", "t5"}  # the held ones count with it
    # As the end of the run rebuilds it from the journal's outcomes.
    replayed = FailureMemory.replay(BASE, [
        ("t0", BASE, None), ("t1", SYMM, "nccl_error", AB),
        ("t2", {**SYMM, "NCCL_PROTO": "LL"}, "nccl_error", AB),
        ("t4", {**BASE, "NCCL_PROTO": "LL"}, None)])
    assert _ruled(replayed) == []
    replayed = pickle.loads(pickle.dumps(replayed))  # as a searcher's state is kept
    replayed.record(SYMM, "t5", "nccl_error", CD)
    assert _ruled(replayed) == [(BACKEND, "torch-symm-mem")]


def _failure(kind: FailureKind, rank: int, nodes: list[str] | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"node": f"node {rank}", "node_rank": rank}
    if nodes:
        details["placement"] = nodes
    return Failure(kind, "m", details=details).to_json()


def test_follower_placement_names_only_failures_read_from_a_followers_log() -> None:
    nodes = ["nodeB", "nodeA"]
    assert follower_placement(_failure(FailureKind.NCCL_ERROR, 1, nodes)) == AB
    assert follower_placement(_failure(FailureKind.CUDA_OOM, 2, nodes)) == AB
    assert follower_placement(_failure(FailureKind.NCCL_ERROR, 0, nodes)) is None  # node 0
    assert follower_placement(_failure(FailureKind.GRAPH_CAPTURE, 1, nodes)) is None
    assert follower_placement(_failure(FailureKind.NCCL_ERROR, 1)) is None  # no placement
    assert follower_placement(Failure(FailureKind.CRASHED, "one node").to_json()) is None
    assert follower_placement(None) is None


def test_the_baselines_follower_only_failure_is_no_broken_environment() -> None:
    """The baseline failing on a follower once: no verdict, it opens the streak instead."""
    check = EnvironmentCheck(dict(BASE))
    assert check.observe("t0", BASE, _failure(FailureKind.NCCL_ERROR, 1, ["a", "b"])) == []
    assert check.verdict is None
    check.observe("t1", BASE, Failure(FailureKind.CRASHED, "x").to_json())
    assert check.verdict is not None and check.verdict.reason == "baseline"
