"""The proxy's reading of SGLang's dispatch: which path SGLang 0.5.23 gives a tensor-parallel
all-reduce and the logits all-gather (SGLang's rules, ``launchers/sglang/release/allreduce.py``,
where every rule names where SGLang has it), and which of those paths the proxy can run.

A ``Route`` here is SGLang's route with the proxy's table of paths it cannot run
(``NOT_MODELLED``): ``modelled`` and ``describe()`` read it. The route functions are SGLang's,
their answers given as such routes (``fusion_route`` and ``custom_route``, the steps, are
read there).
"""

from __future__ import annotations

from collections.abc import Mapping

from launchers.sglang.release import allreduce as rules
from launchers.sglang.release.allreduce import (
    CUSTOM_1SHOT,
    CUSTOM_2SHOT,
    FUSION,
    FUSION_CUTEDSL,
    FUSION_MNNVL,
    MSCCLPP,
    NCCL,
    NCCL_SYMM,
    PCIE_IPC,
    TORCH_SYMM_2SHOT,
    TORCH_SYMM_MULTIMEM,
    Machine,
)
from launchers.sglang.release.allreduce_settings import Settings

__all__ = ["CUSTOM_1SHOT", "CUSTOM_2SHOT", "FUSION", "FUSION_CUTEDSL", "FUSION_MNNVL", "GLOO",
           "MSCCLPP", "NCCL", "NCCL_SYMM", "NOT_MODELLED", "PCIE_IPC", "RUNNABLE", "RUNS",
           "TORCH_SYMM_2SHOT", "TORCH_SYMM_MULTIMEM", "Machine", "Route", "allgather_route",
           "allreduce_route"]

GLOO = "gloo"  # the proxy's CPU path: not one of SGLang's
RUNNABLE = (NCCL, CUSTOM_1SHOT, CUSTOM_2SHOT, TORCH_SYMM_2SHOT, FUSION)
# Paths the proxy cannot run: named, never timed as something else.
NOT_MODELLED = {
    NCCL_SYMM: "NCCL symmetric memory (--enable-symm-mem) registers pynccl windows; torch "
               "cannot drive SGLang's allocator",
    MSCCLPP: "MSCCL++ is not installed with the proxy and its tuned size table is not modelled",
    PCIE_IPC: "FlashInfer's PCIe-IPC all-reduce kernels are not run by the proxy",
    TORCH_SYMM_MULTIMEM: "multimem all-reduce needs NVLink multicast, which the proxy never "
                         "uses (it can take a shared host's GPUs out of service)",
    FUSION_MNNVL: "FlashInfer's mnnvl fusion backend allocates NVLink multicast memory",
    FUSION_CUTEDSL: "FlashInfer's CuTe DSL fusion backend is not modelled",
}

# What the proxy runs for each path, for the plan's notes and the ready line.
RUNS = {
    NCCL: "torch.distributed all_reduce (NCCL), in place",
    GLOO: "torch.distributed all_reduce over gloo (CPU): not what SGLang runs",
    CUSTOM_1SHOT: "torch symmetric memory one-shot all-reduce (peer loads)",
    CUSTOM_2SHOT: "torch symmetric memory two-shot all-reduce (peer loads)",
    TORCH_SYMM_2SHOT: "torch symmetric memory two_shot_all_reduce_ with copies in and out, "
                      "as SGLang's TorchSymmMemCommunicator",
    FUSION: "emulated FlashInfer fusion: torch symmetric memory one-shot all-reduce, then "
            "residual add and RMSNorm as separate kernels",
    "local": "one rank: nothing to reduce",
}


class Route(rules.Route):
    """SGLang's route of one collective, read against what the proxy can run."""

    @classmethod
    def of(cls, route: rules.Route) -> Route:
        return cls(route.path, route.why, route.error)

    @property
    def modelled(self) -> bool:
        return self.modelled_in(NOT_MODELLED)

    def describe(self, unmodelled: Mapping[str, str] | None = None) -> str:
        return super().describe(NOT_MODELLED if unmodelled is None else unmodelled)


def allreduce_route(s: Settings, m: Machine, nbytes: int, *, bf16: bool = True,
                    architecture: str | None = None, tokens: int = 1) -> Route:
    """The path of one decode/verify all-reduce of ``nbytes`` (the fused one included)."""
    return Route.of(rules.allreduce_route(s, m, nbytes, bf16=bf16, architecture=architecture,
                                          tokens=tokens))


def allgather_route(s: Settings, m: Machine) -> Route:
    """The path of the logits all-gather."""
    return Route.of(rules.allgather_route(s, m))
