"""The dispatch's settings from a configuration: SGLang's env parsing, inherited variables,
composite knobs through search_spaces.knobs.expand_config where it exists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from launchers.proxy.comm import settings
from launchers.proxy.comm.settings import Settings


def test_defaults_are_sglangs() -> None:
    s = Settings.from_config({})
    assert s == Settings()
    assert s.custom_ar_v2 is True and s.v2_max_size_kb == 16 * 1024 and s.one_stage is None
    assert s.fusion_backend is None and not s.pcie_ipc and s.pcie_ipc_max_numel == 0


def test_flags_and_variables() -> None:
    s = Settings.from_config({
        "--disable-custom-all-reduce": True, "--enable-torch-symm-mem": False,
        "--flashinfer-allreduce-fusion-backend": "trtllm",
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "False", "SGLANG_USE_1STAGE_ALLREDUCE": 1,
        "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB": "64",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": 1})
    assert s.disable_custom_all_reduce and not s.enable_torch_symm_mem
    assert s.fusion_backend == "trtllm" and s.custom_ar_v2 is False and s.one_stage is True
    assert s.v2_force_push_kb == 64 and s.multicast_off


def test_inherited_environment_counts_unless_the_config_unsets_it() -> None:
    env = {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    assert Settings.from_config({}, env).custom_ar_v2 is False
    assert Settings.from_config({}, env).multicast_off is True
    unset = Settings.from_config({"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": None}, env)
    assert unset.custom_ar_v2 is True  # None: the knob removes the variable, SGLang's default


@pytest.mark.parametrize("name, value", [("SGLANG_USE_1STAGE_ALLREDUCE", "maybe"),
                                         ("SGLANG_PCIE_IPC_MAX_NUMEL", "12k"),
                                         ("SGLANG_PCIE_IPC_MAX_NUMEL", True)])
def test_bad_values_are_refused_as_sglang_would(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_config({name: value})


def test_composites_expand_through_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """With expand_config in search_spaces.knobs the composite's primitives are read; without
    it (until it lands) the configuration is read as it is."""
    import search_spaces.knobs as knobs

    def expand_config(config: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in config.items() if k != "allreduce-backend"}
        if config.get("allreduce-backend") == "nccl":
            out["--disable-custom-all-reduce"] = True
        return out

    monkeypatch.setattr(knobs, "expand_config", expand_config, raising=False)
    assert Settings.from_config({"allreduce-backend": "nccl"}).disable_custom_all_reduce
    monkeypatch.delattr(knobs, "expand_config")
    assert settings.expand({"allreduce-backend": "nccl"}) == {"allreduce-backend": "nccl"}
    assert not Settings.from_config({"allreduce-backend": "nccl"}).disable_custom_all_reduce
