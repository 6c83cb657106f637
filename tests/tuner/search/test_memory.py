"""The failure memory convicts on evidence only: a setting is ruled out when the failures
against it have nothing else in common; never by name order or by count, never a bystander."""

from __future__ import annotations

from typing import Any

from search_spaces.space import SearchSpace, from_mapping
from tuner.search.memory import FailureMemory, evidence_lines

BACKEND = "allreduce-backend"


def _space() -> SearchSpace:
    return from_mapping({"name": "m", "knobs": {
        BACKEND: ["nccl", "torch-symm-mem", "pcie-ipc", "mscclpp"],
        "NCCL_PROTO": ["LL", "Simple"], "NCCL_MAX_NCHANNELS": [4, 16],
        "NCCL_NTHREADS": [128, 256]}}, "test")


BASE: dict[str, Any] = _space().baseline()


def _ruled(memory: FailureMemory) -> list[tuple[str, Any]]:
    return sorted((e["knob"], e["value"]) for e in memory.evidence())


def test_a_value_that_fails_alone_is_ruled_out_on_one_failure_with_its_pair() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, BACKEND: "torch-symm-mem"}, "t1", "graph_capture")
    assert _ruled(memory) == [(BACKEND, "torch-symm-mem")]
    [entry] = memory.evidence()
    assert entry["paired"] == "t0" and entry["trials"] == ["t1"]
    assert "the same configuration with another allreduce-backend ran in t0" in entry["evidence"]
    assert memory.ruled_out({**BASE, BACKEND: "torch-symm-mem", "NCCL_PROTO": "LL"})
    assert memory.ruled_out({**BASE, BACKEND: "pcie-ipc"}) == []


def test_a_tie_is_never_broken_by_name_order() -> None:
    """The issue's tie: a culprit backend and an NCCL_* bystander fail together, twice. Name
    order (every NCCL_* sorts before allreduce-backend) used to convict the bystander; now
    neither is ruled out until a failure sets them apart."""
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    crash = {**BASE, BACKEND: "torch-symm-mem", "NCCL_PROTO": "LL"}
    memory.record(crash, "t1", "graph_capture")
    memory.record({**crash, "NCCL_MAX_NCHANNELS": 4}, "t2", "graph_capture")
    memory.record({**BASE, "NCCL_MAX_NCHANNELS": 4}, "t3", None)
    assert _ruled(memory) == []
    # The bystander runs: the failures now count against the backend alone, but they share
    # NCCL_PROTO=LL, so the backend is not convicted for a pair it may need.
    memory.record({**BASE, "NCCL_PROTO": "LL"}, "t4", None)
    assert _ruled(memory) == []
    memory.record({**BASE, BACKEND: "torch-symm-mem"}, "t5", "graph_capture")
    assert _ruled(memory) == [(BACKEND, "torch-symm-mem")]
    assert memory.ruled_out({**BASE, "NCCL_PROTO": "LL"}) == []


def test_a_bystander_beside_two_culprits_of_one_kind_is_never_convicted() -> None:
    """The issue's second case: a bystander's failures span two culprits of one kind. It used
    to be ruled out for good (nothing could clear it)."""
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    bystander = {**BASE, "NCCL_NTHREADS": 256}
    memory.record({**bystander, BACKEND: "torch-symm-mem"}, "t1", "crashed")
    memory.record({**bystander, "NCCL_PROTO": "Simple"}, "t2", "crashed")
    memory.record({**bystander, BACKEND: "torch-symm-mem", "NCCL_MAX_NCHANNELS": 16}, "t3",
                  "crashed")
    assert _ruled(memory) == []
    for culprit, trial in (({BACKEND: "torch-symm-mem"}, "t4"), ({"NCCL_PROTO": "Simple"}, "t5")):
        memory.record({**BASE, **culprit}, trial, "crashed")
    assert _ruled(memory) == [("NCCL_PROTO", "Simple"), (BACKEND, "torch-symm-mem")]
    assert memory.ruled_out(bystander) == []


def test_failures_with_nothing_else_in_common_convict_without_the_baseline() -> None:
    memory = FailureMemory(BASE)
    for trial, config in (("t0", BASE), ("t1", {**BASE, "NCCL_PROTO": "LL"}),
                          ("t2", {**BASE, "NCCL_MAX_NCHANNELS": 4})):
        memory.record(config, trial, None)
    memory.record({**BASE, BACKEND: "mscclpp", "NCCL_PROTO": "LL"}, "t3", "nccl_error")
    assert _ruled(memory) == []  # it may fail only beside LL
    memory.record({**BASE, BACKEND: "mscclpp", "NCCL_MAX_NCHANNELS": 4}, "t4", "nccl_error")
    assert _ruled(memory) == [(BACKEND, "mscclpp")]
    [entry] = memory.evidence()
    assert entry["trials"] == ["t3", "t4"] and "paired" not in entry
    assert entry["ran"] == {"NCCL_PROTO=LL": "t1", "NCCL_MAX_NCHANNELS=4": "t2"}


def test_a_pair_that_fails_together_rules_out_neither_value() -> None:
    memory = FailureMemory(BASE)
    for trial, config in (("t0", BASE), ("t1", {**BASE, BACKEND: "pcie-ipc"}),
                          ("t2", {**BASE, "NCCL_PROTO": "Simple"})):
        memory.record(config, trial, None)
    pair = {**BASE, BACKEND: "pcie-ipc", "NCCL_PROTO": "Simple"}
    memory.record(pair, "t3", "crashed")
    memory.record({**pair, "NCCL_MAX_NCHANNELS": 4}, "t4", "crashed")
    assert _ruled(memory) == []


def test_a_later_success_clears_a_ruled_out_value() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, "NCCL_NTHREADS": 128}, "t1", "cuda_oom")
    assert _ruled(memory) == [("NCCL_NTHREADS", 128)]
    memory.record({**BASE, "NCCL_NTHREADS": 128, "NCCL_PROTO": "LL"}, "t2", None)  # was running
    assert _ruled(memory) == []


def test_invalid_config_is_learned_per_value_and_environment_is_not() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, "NCCL_PROTO": "Simple"}, "t1", "invalid_config")
    assert _ruled(memory) == [("NCCL_PROTO", "Simple")]
    for trial in ("t2", "t3"):
        memory.record({**BASE, BACKEND: "nccl"}, trial, "port_busy")
        memory.record({**BASE, BACKEND: "mscclpp"}, trial + "x", "not_modelled")
    assert _ruled(memory) == [("NCCL_PROTO", "Simple")]


def test_a_kind_that_strikes_by_chance_needs_two_failures() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, "NCCL_MAX_NCHANNELS": 16}, "t1", "startup_timeout")
    assert _ruled(memory) == []
    memory.record({**BASE, "NCCL_MAX_NCHANNELS": 16, "NCCL_PROTO": "LL"}, "t2",
                  "startup_timeout")
    memory.record({**BASE, "NCCL_PROTO": "LL"}, "t3", None)
    assert _ruled(memory) == [("NCCL_MAX_NCHANNELS", 16)]


def test_the_memory_replays_and_pickles() -> None:
    import pickle

    outcomes = [("t0", BASE, None), ("t1", {**BASE, "NCCL_PROTO": "LL"}, "graph_capture")]
    memory = FailureMemory.replay(BASE, outcomes)
    assert _ruled(memory) == [("NCCL_PROTO", "LL")]
    again = pickle.loads(pickle.dumps(memory))
    assert again.evidence() == memory.evidence()


def test_evidence_lines_say_what_where_and_why() -> None:
    memory = FailureMemory(BASE)
    memory.record(BASE, "t0", None)
    memory.record({**BASE, "NCCL_PROTO": "Simple"}, "t1", "nccl_error")
    memory.record({**BASE, "NCCL_MAX_NCHANNELS": 4}, "t2", None)
    memory.record({**BASE, "NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 4}, "t3", "nccl_error")
    [line] = evidence_lines(memory.evidence())
    assert line.startswith("NCCL_PROTO=Simple: nccl_error in t1, t3, beside NCCL_MAX_NCHANNELS=")
    assert "NCCL_MAX_NCHANNELS=4" in line and "(the same configuration" in line


def test_a_shape_that_crashed_beside_the_users_partners_is_a_suspect() -> None:
    """The H200 campaign: the user's shape (5, 4, 16) the baseline, (1, 4, 16) crashed in
    SGLang ('selected index k out of range') and steps 1 was ruled out for good, so (1, 1, 2)
    never ran. A crash of a speculative shape depends on its partners: steps 1 is a suspect
    until it fails beside another topk."""
    space = from_mapping({"name": "shape", "knobs": {
        "--speculative-num-steps": [1, 3, 5], "--speculative-eagle-topk": [1, 4]}}, "test")
    space = space.with_baseline({"--speculative-num-steps": 5, "--speculative-eagle-topk": 4})
    base = space.baseline()
    memory = FailureMemory(base, space.domains)
    memory.record(base, "t0", None)
    memory.record({**base, "--speculative-num-steps": 1}, "t1", "crashed")
    assert _ruled(memory) == []
    assert [s.knob for s in memory.suspects()] == ["--speculative-num-steps"]
    assert memory.ruled_out({**base, "--speculative-num-steps": 1,
                             "--speculative-eagle-topk": 1}) == []
    [entry] = memory.suspected()  # suspects.json: where it failed, why that is no verdict
    assert entry["where"] == [{"--speculative-eagle-topk": 4}] and "untried" not in entry
    assert memory.lines() == [
        "--speculative-num-steps=1: crashed in t1, suspect, not ruled out (it failed only "
        "beside --speculative-eagle-topk=4, not yet beside other values of "
        "--speculative-eagle-topk)"]
