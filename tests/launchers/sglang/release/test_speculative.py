"""SGLang's speculative shape rules and its no-effect combinations, read without SGLang."""

from __future__ import annotations

from launchers.sglang.release import combinations, speculative
from launchers.sglang.release.speculative import DRAFTS, STEPS, TOPK


def test_a_partial_shape_never_starts() -> None:
    assert speculative.partial_shape({TOPK: 4}) is not None
    assert speculative.partial_shape({DRAFTS: 8, TOPK: None}) is not None
    assert speculative.partial_shape({STEPS: 3, TOPK: 4}) is None
    assert speculative.partial_shape({}) is None


def test_the_draft_tree_bounds_the_draft_tokens() -> None:
    assert speculative.too_many_draft_tokens({STEPS: 2, TOPK: 2, DRAFTS: 6}) is not None
    assert speculative.too_many_draft_tokens({STEPS: 2, TOPK: 2, DRAFTS: 5}) is None


def test_topk_one_runs_steps_plus_one_draft_tokens() -> None:
    assert speculative.resolved_alike({STEPS: 3, TOPK: 1, DRAFTS: 8})[DRAFTS] == 4
    assert speculative.resolved_alike({STEPS: 3, TOPK: 2, DRAFTS: 8})[DRAFTS] == 8
    assert DRAFTS not in speculative.resolved_alike({STEPS: 3, TOPK: 1})


def test_settings_with_no_effect() -> None:
    assert combinations.pcie_ipc({"SGLANG_PCIE_IPC_MAX_NUMEL": 1024}) is not None
    assert combinations.pcie_ipc({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1,
                                  "SGLANG_USE_1STAGE_ALLREDUCE": 1}) is not None
    assert combinations.pcie_ipc({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1}) is None
    sized = {"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": 64}
    assert combinations.custom_allreduce_v2(sized) is None
    assert combinations.custom_allreduce_v2({**sized, "--disable-custom-all-reduce": True})
    assert combinations.custom_allreduce_v2({**sized, "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 0})
    assert combinations.decode_batches({"--cuda-graph-bs-decode": [1, 2],
                                        "--cuda-graph-max-bs-decode": 8}) is not None
