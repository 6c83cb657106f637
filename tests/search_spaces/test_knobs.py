"""The knob catalogue: domains, rendering and cross-knob constraints."""

from __future__ import annotations

import pytest

from search_spaces import knobs


def test_algo_per_collective_and_global_forms_validate() -> None:
    algo = knobs.get("NCCL_ALGO")
    assert algo.validate("allreduce:tree") is None
    assert algo.validate("allreduce:tree;allgather:ring") is None
    assert algo.validate("Tree") is None
    assert algo.validate("^nvls") is None
    assert "unknown algorithm" in (algo.validate("allreduce:bogus") or "")
    assert "unknown collective" in (algo.validate("alltoall:ring") or "")


def test_global_tree_is_flagged_per_collective_is_not() -> None:
    warnings = knobs.config_warnings({"NCCL_ALGO": "Tree"})
    assert warnings and "2.24" in warnings[0]
    assert knobs.config_warnings({"NCCL_ALGO": "allreduce:tree"}) == []


@pytest.mark.parametrize("value,ok", [(64, True), (512, True), (96, True), (100, False),
                                      (32, False), (544, False)])
def test_nthreads_multiple_of_32_in_range(value: int, ok: bool) -> None:
    assert (knobs.get("NCCL_NTHREADS").validate(value) is None) is ok


@pytest.mark.parametrize("value,ok", [(1 << 20, True), (3 << 20, False), (1024, False),
                                      (1 << 30, False)])
def test_buffsize_power_of_two_within_bounds(value: int, ok: bool) -> None:
    assert (knobs.get("NCCL_BUFFSIZE").validate(value) is None) is ok


def test_integers_reject_text_and_booleans() -> None:
    # NCCL parses "4M" as 4 silently: servetune refuses it before launching.
    assert knobs.get("NCCL_MAX_NCHANNELS").validate("4M") is not None
    assert knobs.get("NCCL_MAX_NCHANNELS").validate(True) is not None


def test_min_channels_above_max_is_invalid() -> None:
    reasons = knobs.check_config({"NCCL_MIN_NCHANNELS": 8, "NCCL_MAX_NCHANNELS": 4})
    assert reasons == ["NCCL_MIN_NCHANNELS=8 > NCCL_MAX_NCHANNELS=4"]


def test_speculative_shape_constraint() -> None:
    bad = {"--speculative-num-steps": 1, "--speculative-eagle-topk": 1,
           "--speculative-num-draft-tokens": 4}
    assert knobs.check_config(bad)
    good = {**bad, "--speculative-num-steps": 3}
    assert knobs.check_config(good) == []


def test_nvls_algorithm_conflicts_with_pinned_multicast_off() -> None:
    assert knobs.check_config({"NCCL_ALGO": "allreduce:nvls", "NCCL_NVLS_ENABLE": 0})


def test_unknown_knob_lists_valid_names() -> None:
    with pytest.raises(knobs.UnknownKnob) as err:
        knobs.canonical_name("NCCL_FOO")
    assert "NCCL_ALGO" in str(err.value) and "--enable-symm-mem" in str(err.value)


def test_flag_names_accepted_without_dashes() -> None:
    assert knobs.canonical_name("enable-symm-mem") == "--enable-symm-mem"
    assert knobs.canonical_name("nccl_algo") == "NCCL_ALGO"


def test_rendering() -> None:
    assert knobs.get("NCCL_GRAPH_MIXING_SUPPORT").render_env(0) == "0"
    assert knobs.get("NCCL_ALGO").render_env(None) is None
    assert knobs.get("--disable-custom-all-reduce").render_argv(True) == ["--disable-custom-all-reduce"]
    assert knobs.get("--disable-custom-all-reduce").render_argv(False) == []
    assert knobs.get("--speculative-num-steps").render_argv(3) == ["--speculative-num-steps", "3"]
