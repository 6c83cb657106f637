"""SGLang 0.5.23's allreduce dispatch, table-driven from SGLang's rules (the module docstring of
launchers.sglang.release.allreduce names where each rule lives)."""

from __future__ import annotations

from typing import Any

import pytest

from launchers.sglang.release import allreduce
from launchers.sglang.release.allreduce import Machine, allgather_route, allreduce_route
from launchers.sglang.release.allreduce_settings import Settings

KB, MB = 1024, 1024 * 1024
KIMI_57K = 4 * 7168 * 2  # a Kimi verify all-reduce at 4 tokens, bf16
LLAMA = "LlamaForCausalLM"


def route(config: dict[str, Any], *, world: int = 2, nvlink: bool = True, sm: int | None = 9,
          multicast: bool = False, nbytes: int = KIMI_57K, arch: str = LLAMA,
          tokens: int = 4, graph: bool = True) -> allreduce.Route:
    m = Machine(world=world, nvlink=nvlink, sm_major=sm, multicast=multicast, graph=graph)
    return allreduce_route(Settings.from_primitives(config), m, nbytes, architecture=arch,
                           tokens=tokens)


CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (case, config, machine and message, expected path)
    ("tp2 nvlink default: v2 1shot_push", {}, {}, allreduce.CUSTOM_1SHOT),
    ("tp2: v2 graph 1shot_push up to 16 MB", {}, {"nbytes": 16 * MB}, allreduce.CUSTOM_1SHOT),
    ("tp2: above the v2 max size, NCCL", {}, {"nbytes": 16 * MB + 16}, allreduce.NCCL),
    ("tp2: size not a multiple of 16", {}, {"nbytes": KIMI_57K + 8}, allreduce.NCCL),
    ("v2 max size lowered", {"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": 32}, {}, allreduce.NCCL),
    ("v2 max size at the message", {"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": 56}, {},
     allreduce.CUSTOM_1SHOT),
    ("tp4 nvlink graph: 1shot up to 384 KiB", {}, {"world": 4, "nbytes": 384 * KB},
     allreduce.CUSTOM_1SHOT),
    ("tp4 nvlink graph: 2shot_pull above", {}, {"world": 4, "nbytes": 384 * KB + 16},
     allreduce.CUSTOM_2SHOT),
    ("tp4 eager thresholds: 1shot up to 896 KiB", {},
     {"world": 4, "nbytes": 896 * KB, "graph": False}, allreduce.CUSTOM_1SHOT),
    ("tp8 nvlink graph: 2shot above 128 KiB", {}, {"world": 8, "nbytes": 128 * KB + 16},
     allreduce.CUSTOM_2SHOT),
    ("tp8 nvlink graph: 1shot at 128 KiB", {}, {"world": 8, "nbytes": 128 * KB},
     allreduce.CUSTOM_1SHOT),
    ("legacy tp2: one stage to 8 MiB", {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 0},
     {"nbytes": 8 * MB}, allreduce.CUSTOM_1SHOT),
    ("legacy tp2: NCCL above 8 MiB", {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 0},
     {"nbytes": 8 * MB + 16}, allreduce.NCCL),
    ("legacy tp4 nvlink: one stage below 512 KiB", {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "false"},
     {"world": 4, "nbytes": 512 * KB - 16}, allreduce.CUSTOM_1SHOT),
    ("legacy tp4 nvlink: two stages from 512 KiB", {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "0"},
     {"world": 4, "nbytes": 512 * KB}, allreduce.CUSTOM_2SHOT),
    ("legacy tp8 nvlink: two stages from 256 KiB", {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "no"},
     {"world": 8, "nbytes": 256 * KB}, allreduce.CUSTOM_2SHOT),
    ("pcie tp2: legacy one stage (v2 needs NVLink)", {}, {"nvlink": False},
     allreduce.CUSTOM_1SHOT),
    ("pcie tp4: no custom allreduce, NCCL", {}, {"world": 4, "nvlink": False}, allreduce.NCCL),
    ("pcie tp8: NCCL", {}, {"world": 8, "nvlink": False}, allreduce.NCCL),
    ("--disable-custom-all-reduce", {"--disable-custom-all-reduce": True}, {}, allreduce.NCCL),
    ("torch symm-mem: custom allreduce still first", {"--enable-torch-symm-mem": True},
     {"multicast": True}, allreduce.CUSTOM_1SHOT),
    ("torch symm-mem tp2 with multicast: two_shot",
     {"--enable-torch-symm-mem": True, "--disable-custom-all-reduce": True},
     {"multicast": True}, allreduce.TORCH_SYMM_2SHOT),
    ("torch symm-mem without multicast: disabled, NCCL",
     {"--enable-torch-symm-mem": True, "--disable-custom-all-reduce": True}, {}, allreduce.NCCL),
    ("torch symm-mem tp4: multimem",
     {"--enable-torch-symm-mem": True, "--disable-custom-all-reduce": True},
     {"world": 4, "multicast": True}, allreduce.TORCH_SYMM_MULTIMEM),
    ("torch symm-mem on SM80: not available",
     {"--enable-torch-symm-mem": True, "--disable-custom-all-reduce": True},
     {"sm": 8, "multicast": True}, allreduce.NCCL),
    ("NCCL symm-mem: custom allreduce takes the message", {"--enable-symm-mem": True}, {},
     allreduce.CUSTOM_1SHOT),
    ("NCCL symm-mem without custom allreduce",
     {"--enable-symm-mem": True, "--disable-custom-all-reduce": True}, {}, allreduce.NCCL_SYMM),
    ("MSCCL++ at 2 ranks: no effect", {"--enable-mscclpp": True}, {}, allreduce.CUSTOM_1SHOT),
    ("MSCCL++ at 8 ranks: before custom allreduce", {"--enable-mscclpp": True}, {"world": 8},
     allreduce.MSCCLPP),
    ("PCIe-IPC tp4 pcie", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1}, {"world": 4, "nvlink": False},
     allreduce.PCIE_IPC),
    ("PCIe-IPC after custom allreduce", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1}, {},
     allreduce.CUSTOM_1SHOT),
    ("PCIe-IPC off under 1-stage (deterministic)",
     {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1, "SGLANG_USE_1STAGE_ALLREDUCE": 1},
     {"world": 4, "nvlink": False}, allreduce.NCCL),
    ("PCIe-IPC bounded by SGLANG_PCIE_IPC_MAX_NUMEL",
     {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1, "SGLANG_PCIE_IPC_MAX_NUMEL": 1024},
     {"world": 4, "nvlink": False}, allreduce.NCCL),
    ("PCIe-IPC world 6 unsupported", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1},
     {"world": 6, "nvlink": False}, allreduce.NCCL),
    ("fusion auto-enabled for Kimi on SM90", {}, {"arch": "KimiK25ForConditionalGeneration"},
     allreduce.FUSION),
    ("fusion auto-enabled for DeepSeek-V3 at 8 ranks", {},
     {"arch": "DeepseekV3ForCausalLM", "world": 8}, allreduce.FUSION),
    ("fusion enforce-disabled", {"--enforce-disable-flashinfer-allreduce-fusion": True},
     {"arch": "DeepseekV3ForCausalLM"}, allreduce.CUSTOM_1SHOT),
    ("fusion not auto for Llama", {}, {}, allreduce.CUSTOM_1SHOT),
    ("fusion asked for Llama", {"--flashinfer-allreduce-fusion-backend": "trtllm"}, {},
     allreduce.FUSION),
    ("fusion above 2048 tokens: not fused", {}, {"arch": "DeepseekV3ForCausalLM",
                                                "tokens": 4096}, allreduce.CUSTOM_1SHOT),
    ("fusion on SM100 auto: mnnvl", {}, {"arch": "DeepseekV3ForCausalLM", "sm": 10},
     allreduce.FUSION_MNNVL),
    ("fusion wins over --disable-custom-all-reduce", {"--disable-custom-all-reduce": True},
     {"arch": "DeepseekV3ForCausalLM"}, allreduce.FUSION),
    ("fusion not auto-enabled on SM80", {}, {"arch": "DeepseekV3ForCausalLM", "sm": 8},
     allreduce.CUSTOM_1SHOT),
    ("one rank", {}, {"world": 1}, allreduce.NCCL),
]


@pytest.mark.parametrize("case, config, where, path", CASES, ids=[c[0] for c in CASES])
def test_allreduce_route(case: str, config: dict[str, Any], where: dict[str, Any],
                         path: str) -> None:
    r = route(config, **where)
    assert r.path == path, r.describe()
    assert r.error is None


REFUSED: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({"--flashinfer-allreduce-fusion-backend": "cutedsl"}, {}, "Blackwell"),
    ({"--flashinfer-allreduce-fusion-backend": "auto"}, {"sm": 8}, "SM90 or SM10X"),
]


@pytest.mark.parametrize("config, where, match", REFUSED)
def test_configurations_sglang_refuses(config: dict[str, Any], where: dict[str, Any],
                                       match: str) -> None:
    r = route(config, **where)
    assert r.error is not None and match in r.error
    assert r.describe().startswith("SGLang refuses")


def test_why_names_the_rule() -> None:
    assert "1shot_push" in route({}).why and "SM90" in route({}).why
    assert "legacy CustomAllreduce 1stage" in route({}, nvlink=False).why
    assert "multicast" in route({"--enable-torch-symm-mem": True,
                                 "--disable-custom-all-reduce": True}).why
    fused = route({}, arch="KimiK25ForConditionalGeneration")
    assert "auto-enables" in fused.why and "trtllm" in fused.why


def test_allgather_route() -> None:
    two = Machine(world=2, nvlink=True)
    assert allgather_route(Settings(), two).path == allreduce.NCCL
    assert allgather_route(Settings(enable_symm_mem=True), two).path == allreduce.NCCL_SYMM
    assert allgather_route(Settings(enable_mscclpp=True), two).path == allreduce.NCCL
    eight = Machine(world=8, nvlink=True)
    assert allgather_route(Settings(enable_mscclpp=True), eight).path == allreduce.MSCCLPP


def test_unknown_architecture_gets_the_default_table() -> None:
    assert route({}, sm=8, world=2, nbytes=1 * MB).path == allreduce.CUSTOM_1SHOT
    assert route({}, sm=8, world=2, nbytes=1 * MB + 16).path == allreduce.CUSTOM_2SHOT
    assert route({}, sm=None).path == allreduce.CUSTOM_1SHOT
