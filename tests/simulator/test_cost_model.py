"""The stand-in's cost model: pure, field-shaped, with the optimum it claims to have."""

from __future__ import annotations

import random

import pytest

from search_spaces.space import load_preset
from simulator import cost_model
from simulator.cost_model import SpecParams


def test_pure_and_field_shaped() -> None:
    spec = SpecParams("EAGLE3")
    a = cost_model.timing({}, {}, 8, spec)
    assert a == cost_model.timing({}, {}, 8, spec)
    assert 20.0 < a.verify_ms < 30.0  # the field's slow verify pass, mostly allreduce
    assert a.cycle_ms == pytest.approx(a.verify_ms + a.draft_ms + cost_model.OVERHEAD_MS)
    tuned = cost_model.timing({"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL",
                               "NCCL_MAX_NCHANNELS": "4", "NCCL_BUFFSIZE": "262144"}, {}, 8, spec)
    assert tuned.verify_ms < a.verify_ms / 2
    assert cost_model.timing({}, {}, 1, spec).verify_ms == pytest.approx(
        cost_model.BASE_COMPUTE_MS * 1.09)  # no allreduce at tp 1


def test_known_directions() -> None:
    spec = SpecParams("EAGLE3")

    def verify(env: dict[str, str], flags: dict[str, object] | None = None) -> float:
        return cost_model.timing(env, flags or {}, 8, spec).verify_ms  # type: ignore[arg-type]

    assert verify({"NCCL_ALGO": "allreduce:tree"}) < verify({"NCCL_ALGO": "allreduce:ring"})
    assert verify({"NCCL_PROTO": "LL"}) < verify({"NCCL_PROTO": "LL128"}) < verify(
        {"NCCL_PROTO": "Simple"})
    assert verify({"NCCL_MAX_NCHANNELS": "4"}) < verify({"NCCL_MAX_NCHANNELS": "16"})
    assert verify({"NCCL_BUFFSIZE": "262144"}) < verify({"NCCL_BUFFSIZE": "4194304"})
    trtllm = verify({}, {"--flashinfer-allreduce-fusion-backend": "trtllm"})
    auto = verify({}, {"--flashinfer-allreduce-fusion-backend": "auto"})
    assert trtllm < auto < verify({})
    assert verify({}, {"--flashinfer-allreduce-fusion-backend": "trtllm",
                       "--enforce-disable-flashinfer-allreduce-fusion": True}) == verify({})
    assert verify({"NCCL_MAX_NCHANNELS": "4M"}) == verify({"NCCL_MAX_NCHANNELS": "4"})  # strtoll


def test_global_tree_crashes_only_with_several_ranks() -> None:
    assert cost_model.crash_reason({"NCCL_ALGO": "Tree"}, 8) == "global-tree"
    assert cost_model.crash_reason({"NCCL_ALGO": "tree"}, 2) == "global-tree"
    assert cost_model.crash_reason({"NCCL_ALGO": "Tree"}, 1) is None
    assert cost_model.crash_reason({"NCCL_ALGO": "allreduce:tree"}, 8) is None
    assert cost_model.config_timing({"NCCL_ALGO": "Tree"}) is None


def test_speculative_shape() -> None:
    off = cost_model.timing({}, {}, 8, SpecParams())
    assert off.accept_length == 1.0 and off.draft_ms == 0.0
    short = cost_model.timing({}, {}, 8, SpecParams("EAGLE3", 1, 1, 2))
    deep = cost_model.timing({}, {}, 8, SpecParams("EAGLE3", 5, 1, 6))
    assert short.accept_length < deep.accept_length <= 6
    assert short.draft_ms < deep.draft_ms


def test_optimum_of_the_verify_campaign() -> None:
    full = load_preset("verify-campaign")
    space, _ = full.restricted_to({"allreduce-backend", "NCCL_ALGO", "NCCL_PROTO",
                                   "NCCL_MAX_NCHANNELS", *full.pins})
    config, value = cost_model.optimum(space.domains, space.pins)
    assert config["NCCL_ALGO"] == "allreduce:tree"
    assert config["NCCL_PROTO"] == "LL"
    assert config["NCCL_MAX_NCHANNELS"] == 4
    assert config["allreduce-backend"] == "flashinfer-fusion"
    baseline = cost_model.config_timing(space.baseline())
    assert baseline is not None and value > 1.8 * baseline.tok_s()
    for _ in range(50):  # no sampled point beats it
        point = space.sample(random.Random(_))
        if space.validate(point):
            continue
        timing = cost_model.config_timing(point)
        assert timing is None or timing.tok_s() <= value + 1e-9


def test_noise() -> None:
    rng = random.Random(0)
    assert cost_model.noisy(10.0, 0.0, rng) == 10.0
    values = [cost_model.noisy(10.0, 0.02, rng) for _ in range(200)]
    assert 9.9 < sum(values) / len(values) < 10.1 and min(values) > 0
