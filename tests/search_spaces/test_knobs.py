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


def test_pcie_ipc_bound_needs_the_kernels_on_and_not_deterministic() -> None:
    assert knobs.check_config({"SGLANG_PCIE_IPC_MAX_NUMEL": 262144}) == [
        "SGLANG_PCIE_IPC_MAX_NUMEL has no effect without SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"]
    assert knobs.check_config({"SGLANG_PCIE_IPC_MAX_NUMEL": 262144,
                               "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1}) == []
    assert knobs.check_config({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1,
                               "SGLANG_USE_1STAGE_ALLREDUCE": 1})
    assert knobs.check_config({"SGLANG_PCIE_IPC_MAX_NUMEL": 0})  # 0 is SGLang's "unset"


def test_custom_allreduce_v2_sizes_need_v2() -> None:
    size = {"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": 4096}
    assert knobs.check_config(size) == []
    assert knobs.check_config({**size, "--disable-custom-all-reduce": True}) == [
        "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB has no effect with --disable-custom-all-reduce"]
    assert knobs.check_config({"SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB": 0,
                               "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 0})
    assert knobs.check_config({**size, "allreduce-backend": "custom-v1"})  # through the composite


@pytest.mark.parametrize(("value", "ok"), [("1,2,4,8", True), ("8", True), ("1,2,2", False),
                                           ("4,2", False), ("0,1", False), ("1, 2", True),
                                           ("1;2", False), ("", False), (8, False)])
def test_decode_batch_list(value: object, ok: bool) -> None:
    assert (knobs.get("--cuda-graph-bs-decode").validate(value) is None) is ok  # type: ignore[arg-type]


def test_list_and_setup_flags_render_as_sglang_parses_them() -> None:
    assert knobs.get("--cuda-graph-bs-decode").render_argv("1,2,4") == [
        "--cuda-graph-bs-decode", "1", "2", "4"]
    assert knobs.get("--load-format").render_argv("dummy") == ["--load-format", "dummy"]
    assert knobs.get("--load-format").validate("dummy weights") is not None
    assert knobs.get("--skip-server-warmup").render_argv(True) == ["--skip-server-warmup"]
    assert knobs.check_config({"--cuda-graph-bs-decode": "1,2,4",
                               "--cuda-graph-max-bs-decode": 8}) == [
        "--cuda-graph-max-bs-decode has no effect with --cuda-graph-bs-decode"]


def test_every_knob_states_its_source_and_default() -> None:
    for knob in knobs.CATALOGUE.values():
        assert knob.default, knob.name
        expected = (knobs.Source.SGLANG_FLAG if knob.name.startswith("--")
                    else knobs.Source.SGLANG_ENV if knob.name.startswith("SGLANG_")
                    else knobs.Source.NCCL if knob.name.startswith("NCCL_") else None)
        if expected is not None:
            assert knob.source is expected, knob.name


def test_unknown_knob_names_the_closest() -> None:
    with pytest.raises(knobs.UnknownKnob) as err:
        knobs.canonical_name("SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE")
    assert "did you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?" in str(err.value)


def test_the_catalogue_states_the_defaults_sglangs_dispatch_reads() -> None:
    """The SGLANG_* allreduce knobs' stated defaults are those the release's rules read
    (launchers/sglang/release/allreduce_settings): unset, or the value first."""
    from launchers.sglang.release.allreduce_settings import ENV_BOOL, ENV_INT

    for name, default in {**ENV_BOOL, **ENV_INT}.items():
        stated = knobs.PRIMITIVES[name].default
        expected = "unset" if default is None else str(int(default))
        assert stated.split(" ")[0].rstrip(":") == expected, (name, stated)
