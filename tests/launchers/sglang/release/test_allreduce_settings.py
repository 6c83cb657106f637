"""What SGLang's allreduce dispatch reads from primitive flags and SGLANG_* variables, with its
defaults and its env registry's parsing (``launchers/sglang/release/allreduce_settings``)."""

from __future__ import annotations

import pytest

from launchers.sglang.release.allreduce_settings import Settings


def test_defaults_are_sglangs() -> None:
    s = Settings.from_primitives({})
    assert s == Settings()
    assert s.custom_ar_v2 is True and s.v2_max_size_kb == 16 * 1024 and s.one_stage is None
    assert s.fusion_backend is None and not s.pcie_ipc and s.pcie_ipc_max_numel == 0


def test_flags_and_variables() -> None:
    s = Settings.from_primitives({
        "--disable-custom-all-reduce": True, "--enable-torch-symm-mem": False,
        "--flashinfer-allreduce-fusion-backend": "trtllm",
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "False", "SGLANG_USE_1STAGE_ALLREDUCE": 1,
        "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB": "64",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": 1})
    assert s.disable_custom_all_reduce and not s.enable_torch_symm_mem
    assert s.fusion_backend == "trtllm" and s.custom_ar_v2 is False and s.one_stage is True
    assert s.v2_force_push_kb == 64 and s.multicast_off


@pytest.mark.parametrize("name, value", [("SGLANG_USE_1STAGE_ALLREDUCE", "maybe"),
                                         ("SGLANG_PCIE_IPC_MAX_NUMEL", "12k"),
                                         ("SGLANG_PCIE_IPC_MAX_NUMEL", True)])
def test_bad_values_are_refused_as_sglang_would(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_primitives({name: value})
