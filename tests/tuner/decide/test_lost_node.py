"""A node lost mid-trial says nothing about the configuration: no verdict on the environment
(not even when it hits the baseline), and nothing the failure memory holds against a value."""

from __future__ import annotations

from typing import Any

from tuner.decide.environment import EnvironmentCheck
from tuner.search.memory import FailureMemory

BASE: dict[str, Any] = {"NCCL_ALGO": None, "NCCL_IB_QPS_PER_CONNECTION": None}
LOST = {"kind": "node_lost", "message": "node 1 (Ray node 4e643a31) lost: the actor died",
        "log_tail": "", "hint": ""}


def test_a_lost_node_is_no_verdict_even_on_the_baseline() -> None:
    check = EnvironmentCheck(BASE)
    assert [o.trial_id for o in check.observe("t0", BASE, LOST)] == ["t0"]
    for n in range(1, 4):
        check.observe(f"t{n}", {**BASE, "NCCL_IB_QPS_PER_CONNECTION": n}, LOST)
    assert check.verdict is None


def test_the_failure_memory_rules_no_value_out_for_it() -> None:
    memory = FailureMemory(never=BASE)
    config = {**BASE, "NCCL_IB_QPS_PER_CONNECTION": 8}
    for n in range(3):
        memory.record(config, f"t{n}", "node_lost")
    assert memory.ruled_out(config) == [] and memory.evidence() == []
    for n in range(3):  # the same failures as a crash: ruled out (the test can fail)
        memory.record(config, f"c{n}", "crashed")
    assert memory.ruled_out(config)
