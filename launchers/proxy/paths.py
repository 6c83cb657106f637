"""The plan's view of the collectives: the interconnect regime, the machine as SGLang would
see it, the path of the all-reduces and of the logits all-gather (``comm.dispatch``), the
environment a regime sets, and the notes that say what is and is not modelled.

Interconnect regimes (``ProxyArgs.interconnect``):
  nvlink  the GPUs as they are (NVLink between them);
  pcie    what a PCIe box has, on NVLink hardware: NCCL_P2P_DISABLE=1 (NCCL goes through host
          memory, as between GPUs under different root complexes) and SGLang's rules without
          NVLink (no custom allreduce v2; the legacy custom allreduce at 2 ranks only; no
          multicast). What the stand-in cannot reproduce: a peer-memory custom allreduce still
          moves its bytes over NVLink here, so its time is NVLink's, not PCIe's; and a box
          whose GPUs have no peer access at all runs NCCL at every size (model it with
          --disable-custom-all-reduce);
  auto    nvlink or pcie as NVML reports the trial's GPUs (nvlink where NVML is missing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launchers.proxy.comm import dispatch, native
from launchers.proxy.comm.settings import Settings
from launchers.proxy.topology import Topology

PCIE_ENV = {"NCCL_P2P_DISABLE": "1"}
INVALID = "invalid"  # the --allreduce-path of a configuration SGLang would refuse
INVALID_NOTE = "invalid configuration: "


@dataclass(frozen=True)
class Paths:
    """The collectives of one planned trial."""

    interconnect: str  # nvlink | pcie
    machine: dispatch.Machine
    allreduce: dispatch.Route
    allgather: dispatch.Route
    env: dict[str, str] = field(default_factory=dict)  # the regime's variables
    notes: tuple[str, ...] = ()
    error: str | None = None  # a setting SGLang would refuse
    mode: str = native.EMULATED  # who runs the collectives (comm.native)

    @property
    def allreduce_arg(self) -> str:
        return INVALID if self.error or self.allreduce.error else self.allreduce.path

    @property
    def not_modelled(self) -> list[str]:
        """Why each path the proxy cannot run is not modelled, once per path, with which
        collective SGLang sends there and why (empty: all run)."""
        table = native.not_modelled(self.mode)
        routes: dict[str, list[tuple[str, dispatch.Route]]] = {}
        for what, r in (("all-reduce", self.allreduce), ("all-gather", self.allgather)):
            if r.error is None and not r.modelled_in(table):
                routes.setdefault(r.path, []).append((what, r))
        return [f"{path}: not modelled ({table[path]}); "
                + "; ".join(f"{what}: {r.why}" for what, r in found)
                for path, found in routes.items()]


def machine(*, ranks: int, cuda: bool, interconnect: str, topology: Topology, graph: bool,
            settings: Settings) -> tuple[dispatch.Machine, str, list[str]]:
    """The machine, the resolved regime and notes on what was assumed."""
    notes = []
    resolved = interconnect
    if interconnect == "auto":
        if topology.nvlink is None:
            resolved = "nvlink"
            notes.append("interconnect: NVLink assumed (" + ("CPU run" if not cuda else
                                                            "no NVML answer") + ")")
        else:
            resolved = "nvlink" if topology.nvlink else "pcie"
    sm = topology.sm_major
    if sm is None:
        sm = 9
        notes.append("compute capability 9.0 (Hopper) assumed for SGLang's tables")
    nvlink = resolved == "nvlink"
    multicast = nvlink and not settings.multicast_off
    return (dispatch.Machine(world=ranks, nvlink=nvlink, sm_major=sm, multicast=multicast,
                             graph=graph), resolved, notes)


def resolve(config: Mapping[str, Any], *, ranks: int, cuda: bool, interconnect: str,
            topology: Topology, graph: bool, architecture: str | None, tokens: int,
            hidden: int, inherited: Mapping[str, str], mode: str = native.EMULATED) -> Paths:
    """The paths SGLang would take for this configuration on this machine, with notes, for
    the proxy's ``mode`` of running them (``comm.native``)."""
    try:
        settings = Settings.from_config(config, inherited)
    except ValueError as err:
        m = dispatch.Machine(world=ranks, nvlink=True)
        none = dispatch.Route(INVALID, str(err), str(err))
        return Paths(interconnect, m, none, none, {}, (INVALID_NOTE + str(err),), str(err),
                     mode)
    m, resolved, notes = machine(ranks=ranks, cuda=cuda, interconnect=interconnect,
                                 topology=topology, graph=graph, settings=settings)
    nbytes = tokens * hidden * 2  # bf16, as SGLang serves these models
    allreduce = dispatch.allreduce_route(settings, m, nbytes, architecture=architecture,
                                         tokens=tokens)
    allgather = dispatch.allgather_route(settings, m)
    env = dict(PCIE_ENV) if resolved == "pcie" else {}
    if allreduce.error is not None:
        notes.append(INVALID_NOTE + allreduce.error)
    table = native.not_modelled(mode)
    notes.append(f"all-reduce ({2} per layer, {nbytes} bytes): SGLang would run "
                 f"{allreduce.describe(table)}")
    notes.append(f"all-gather of the logits: SGLang would run {allgather.describe(table)}")
    if mode == native.NATIVE:
        notes.append("the proxy runs: the installed SGLang's GroupCoordinator (all_reduce, "
                     "all_gather_into_tensor)" + ("" if cuda else " over gloo, as its CPU "
                                                  "engine does (SGLANG_USE_CPU_ENGINE=1)"))
    elif allreduce.modelled and cuda:
        notes.append("the proxy runs: " + dispatch.RUNS[allreduce.path])
    if allreduce.path == dispatch.FUSION and allreduce.modelled and mode != native.NATIVE:
        notes.append("fusion is emulated, not FlashInfer's kernel: the one-shot all-reduce, "
                     "the residual add and the RMSNorm run as separate kernels, so each fused "
                     "all-reduce costs its launches and memory round trips more than FlashInfer's "
                     "single kernel would (an upper bound of the fused path)")
    if not cuda and mode != native.NATIVE:
        notes.append("CPU: every collective ran gloo, whatever SGLang would run")
    if resolved == "pcie":
        notes.append("interconnect pcie on " + ("NVLink hardware" if topology.nvlink else
                     "this machine") + ": NCCL_P2P_DISABLE=1 and SGLang's rules without "
                     "NVLink; a custom allreduce still moves its bytes over the GPUs' own "
                     "links, so its time is not a PCIe box's")
    return Paths(resolved, m, allreduce, allgather, env, tuple(notes), mode=mode)
