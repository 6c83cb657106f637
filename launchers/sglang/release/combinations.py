"""SGLang settings that have no effect beside another (read in SGLang 0.5.23): a configuration
with one would only repeat the point without it, at the cost of a server launch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]

PCIE_IPC = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
PCIE_IPC_MAX_NUMEL = "SGLANG_PCIE_IPC_MAX_NUMEL"
ONE_STAGE = "SGLANG_USE_1STAGE_ALLREDUCE"
CUSTOM_AR_V2 = "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"
V2_SIZES = ("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB",
            "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB",
            "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB")


def pcie_ipc(config: Config) -> str | None:
    """pcie_ipc_ar.py: the bound matters only with the kernels on; ``eligible_group`` keeps
    them off when collectives are deterministic (SGLANG_USE_1STAGE_ALLREDUCE=1)."""
    enabled = config.get(PCIE_IPC) == 1
    if config.get(PCIE_IPC_MAX_NUMEL) is not None and not enabled:
        return f"{PCIE_IPC_MAX_NUMEL} has no effect without {PCIE_IPC}=1"
    if enabled and config.get(ONE_STAGE) == 1:
        return (f"{ONE_STAGE}=1 makes collectives deterministic, which keeps "
                "the PCIe-IPC allreduce off")
    return None


def custom_allreduce_v2(config: Config) -> str | None:
    """custom_all_reduce.py ``dispatch_custom_allreduce``: the v2 sizes need custom allreduce
    on and v2 chosen."""
    sized = next((name for name in V2_SIZES if config.get(name) is not None), None)
    if sized is None:
        return None
    if config.get("--disable-custom-all-reduce") is True:
        return f"{sized} has no effect with --disable-custom-all-reduce"
    if config.get(CUSTOM_AR_V2) == 0:
        return f"{sized} has no effect with {CUSTOM_AR_V2}=0"
    return None


def decode_batches(config: Config) -> str | None:
    """arg_groups/memory_hook.py: an explicit decode batch list sets the largest decode batch
    to its maximum, whatever --cuda-graph-max-bs-decode says."""
    if config.get("--cuda-graph-bs-decode") is not None \
            and config.get("--cuda-graph-max-bs-decode") is not None:
        return "--cuda-graph-max-bs-decode has no effect with --cuda-graph-bs-decode"
    return None
