"""Which path SGLang 0.5.23 gives a tensor-parallel all-reduce and the logits all-gather: a
pure function of the settings (flags and SGLANG_* variables), the machine and the message.
No torch here; every rule below was read in the installed SGLang (paths under
``python/sglang/srt/``) and is tested in tests/launchers/proxy/test_dispatch.py through the
proxy's reading of it (``launchers/proxy/comm/dispatch.py``: which paths the proxy can run).

All-reduce, in SGLang's order:
1. Fusion. ``--flashinfer-allreduce-fusion-backend`` (or SGLang's auto-enable for the
   architectures in ``arg_groups/overrides.py`` ``_FLASHINFER_ALLREDUCE_FUSION_ARCHS`` on SM90
   and SM100 with tp > 1, single node) unless ``--enforce-disable-flashinfer-allreduce-fusion``;
   the backend resolves as ``layers/flashinfer_comm_fusion.py`` ``_resolve_backend`` does (auto:
   trtllm on SM90, mnnvl on SM100; cutedsl needs SM100). A layer's all-reduce is then fused with
   the residual add and the next RMSNorm for batches of at most 2048 tokens
   (``layers/layer_boundary/residual/add_norm.py`` ``flashinfer_ar_fusion_applies``).
2. ``GroupCoordinator.all_reduce`` (``distributed/parallel_state.py``): MSCCL++ where it serves
   the size (``pymscclpp.py``: 4, 8, ... ranks); NCCL symmetric memory (``--enable-symm-mem``)
   unless MSCCL++ or custom allreduce takes the tensor; then
   ``_resolve_outplace_all_reduce_method``: custom allreduce, PCIe-IPC, MSCCL++, torch
   symmetric memory; else NCCL in place.
3. Custom allreduce (``device_communicators/custom_all_reduce.py``
   ``dispatch_custom_allreduce``): CustomAllReduceV2 when ``SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2``
   (default on), the world size has a tuned table and every GPU pair has NVLink
   (``can_use_custom_all_reduce_v2``); else the legacy CustomAllreduce: 2, 4, 6 or 8 ranks,
   more than 2 only with full NVLink, and GPU peer access (``can_use_custom_all_reduce_with_
   nvlink``). ``should_custom_ar``: the size a multiple of 16 bytes; legacy: 2 ranks or full
   NVLink and at most 8 MiB; v2: an algorithm within its thresholds (``v2_tables``). The legacy
   kernel (sgl-kernel's custom_all_reduce.cuh) runs one stage at 2 ranks, and with full NVLink
   one stage below 512 KiB (<= 4 ranks) or 256 KiB (<= 8), else two stages.
4. PCIe-IPC (``pcie_ipc_ar.py``): ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``, 2, 4 or 8 ranks, bf16,
   not deterministic (on CUDA ``SGLANG_USE_1STAGE_ALLREDUCE=1`` counts as deterministic), at
   most ``SGLANG_PCIE_IPC_MAX_NUMEL`` elements when set (else the decode width, which a verify
   batch fits).
5. Torch symmetric memory (``torch_symm_mem.py`` TorchSymmMemCommunicator): compute capability
   9 or 10, 2/4/6/8 ranks, bf16, size a multiple of 4 below 64 MiB (2, 4 ranks) or 128 MiB;
   disabled without NVLink multicast; ``multimem_all_reduce_`` at 4, 6, 8 ranks, else
   ``two_shot_all_reduce_``.
All-gather (``GroupCoordinator._all_gather_into_tensor``): MSCCL++ where it serves, else
NCCL through pynccl (NCCL symmetric memory with ``--enable-symm-mem``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launchers.sglang.release import v2_tables
from launchers.sglang.release.allreduce_settings import Settings

KB, MB = 1024, 1024 * 1024

# arg_groups/overrides.py: the architectures SGLang auto-enables FlashInfer fusion for.
FUSION_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
    "GptOssForCausalLM", "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "MistralLarge3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration",
    "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration", "KimiK25ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3"})
FUSION_MAX_TOKENS = 2048  # add_norm.py FUSE_ALLREDUCE_MAX_BATCH_SIZE
LEGACY_MAX = 8 * MB  # CustomAllreduce._MAX_CAR_SIZE (CUDA)
LEGACY_WORLDS = (2, 4, 6, 8)
TORCH_SYMM_MAX = {2: 64 * MB, 4: 64 * MB, 6: 128 * MB, 8: 128 * MB}  # all_reduce_utils.py
MSCCLPP_WORLDS = (4, 8, 16, 32, 64)
PCIE_IPC_WORLDS = (2, 4, 8)

# The paths, as the proxy's worker (--allreduce-path / --allgather-path) names them.
NCCL = "nccl"
CUSTOM_1SHOT = "custom_ar_1shot"
CUSTOM_2SHOT = "custom_ar_2shot"
TORCH_SYMM_2SHOT = "torch_symm_mem_2shot"
FUSION = "fusion"  # allreduce + residual add + RMSNorm
NCCL_SYMM = "nccl_symm_mem"
MSCCLPP = "mscclpp"
PCIE_IPC = "pcie_ipc"
TORCH_SYMM_MULTIMEM = "torch_symm_mem_multimem"
FUSION_MNNVL = "fusion_mnnvl"
FUSION_CUTEDSL = "fusion_cutedsl"


@dataclass(frozen=True)
class Machine:
    """The group as SGLang sees it."""

    world: int
    nvlink: bool  # every GPU pair over NVLink (SGLang's is_full_nvlink)
    sm_major: int | None = 9  # compute capability major; None: unknown
    multicast: bool = False  # NVLink multicast usable (NVSwitch, not disabled)
    peer_access: bool = True  # CUDA peer access between the GPUs (SGLang's can_p2p)
    graph: bool = True  # the pass runs in a CUDA graph (v2's graph thresholds)


@dataclass(frozen=True)
class Route:
    """The path of one collective: what SGLang runs, and why (or why it refuses to start)."""

    path: str
    why: str
    error: str | None = None  # SGLang refuses the configuration at start-up

    def modelled_in(self, unmodelled: Mapping[str, str]) -> bool:
        """Whether a mode whose paths it cannot run are ``unmodelled`` runs this one."""
        return self.error is None and self.path not in unmodelled

    def describe(self, unmodelled: Mapping[str, str] | None = None) -> str:
        table = unmodelled or {}
        if self.error is not None:
            return f"SGLang refuses this configuration: {self.error}"
        if self.path in table:
            return f"{self.path}: not modelled ({table[self.path]}); {self.why}"
        return f"{self.path}: {self.why}"


def fusion_route(s: Settings, m: Machine, architecture: str | None, tokens: int
                 ) -> Route | None:
    """The fused all-reduce + add + RMSNorm where SGLang takes it, else None."""
    if s.enforce_disable_fusion:
        return None
    backend, why = s.fusion_backend, "--flashinfer-allreduce-fusion-backend " + str(s.fusion_backend)
    if backend is None:
        if not (architecture in FUSION_ARCHS and m.sm_major in (9, 10) and m.world > 1):
            return None
        backend, why = "auto", f"SGLang auto-enables it for {architecture} on SM{m.sm_major}0"
    if m.sm_major not in (9, 10):
        return Route(FUSION, why, "FlashInfer allreduce fusion requires SM90 or SM10X GPUs")
    if backend == "cutedsl" and m.sm_major != 10:
        return Route(FUSION_CUTEDSL, why, "the cutedsl backend requires a Blackwell system")
    if backend == "auto":
        backend = "mnnvl" if m.sm_major == 10 else "trtllm"
    if m.world <= 1 or not 0 < tokens <= FUSION_MAX_TOKENS:
        return None
    path = {"trtllm": FUSION, "mnnvl": FUSION_MNNVL, "cutedsl": FUSION_CUTEDSL}.get(backend)
    if path is None:
        return Route(FUSION, why, f"unknown fusion backend {backend!r}")
    return Route(path, f"FlashInfer {backend} all-reduce + residual add + RMSNorm ({why}; "
                       f"{tokens} tokens <= {FUSION_MAX_TOKENS})")


def custom_route(s: Settings, m: Machine, nbytes: int) -> Route | None:
    """SGLang's custom allreduce where it takes the message, else None."""
    if s.disable_custom_all_reduce or m.world < 2 or nbytes % 16:
        return None
    table = v2_tables.table(m.sm_major, m.world)
    if s.custom_ar_v2 and table is not None and m.nvlink and m.peer_access:
        algo = v2_tables.v2_algorithm(
            table, m.world, nbytes, graph=m.graph, max_size_kb=s.v2_max_size_kb,
            force_pull_kb=s.v2_force_pull_kb, force_push_kb=s.v2_force_push_kb,
            multicast=m.multicast)
        if algo is None:
            return None
        path = CUSTOM_1SHOT if algo.startswith("1shot") else CUSTOM_2SHOT
        return Route(path, f"CustomAllReduceV2 {algo} ({'graph' if m.graph else 'eager'} "
                           f"thresholds, SM{m.sm_major}0, {m.world} ranks)")
    why = ("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0" if not s.custom_ar_v2 else
           "v2 needs full NVLink" if not m.nvlink else f"no v2 table for {m.world} ranks")
    if m.world not in LEGACY_WORLDS or not m.peer_access or (m.world > 2 and not m.nvlink):
        return None
    if nbytes > LEGACY_MAX:
        return None
    one_stage = m.world == 2 or nbytes < (512 * KB if m.world <= 4 else 256 * KB)
    stage = "1stage" if one_stage else "2stage"
    return Route(CUSTOM_1SHOT if one_stage else CUSTOM_2SHOT,
                 f"legacy CustomAllreduce {stage} ({why})")


def allreduce_route(s: Settings, m: Machine, nbytes: int, *, bf16: bool = True,
                    architecture: str | None = None, tokens: int = 1) -> Route:
    """The path of one decode/verify all-reduce of ``nbytes`` (the fused one included)."""
    if m.world <= 1:
        return Route(NCCL, "one rank: SGLang skips the all-reduce")
    fused = fusion_route(s, m, architecture, tokens)
    if fused is not None:
        return fused
    mscclpp = s.enable_mscclpp and m.world in MSCCLPP_WORLDS
    custom = None if mscclpp else custom_route(s, m, nbytes)
    if s.enable_symm_mem and custom is None and not mscclpp:
        return Route(NCCL_SYMM, "--enable-symm-mem and no custom allreduce for this size")
    if custom is not None:
        return custom
    deterministic = bool(s.one_stage)
    numel = nbytes // 2
    if (s.pcie_ipc and not mscclpp and m.world in PCIE_IPC_WORLDS and bf16 and not deterministic
            and (not s.pcie_ipc_max_numel or numel <= s.pcie_ipc_max_numel)):
        return Route(PCIE_IPC, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1")
    if mscclpp:
        return Route(MSCCLPP, f"--enable-mscclpp at {m.world} ranks")
    if s.enable_torch_symm_mem:
        limit = TORCH_SYMM_MAX.get(m.world)
        if m.sm_major not in (9, 10) or limit is None or not bf16:
            why = "--enable-torch-symm-mem: not available here (compute capability, ranks, dtype)"
        elif not m.multicast:
            why = ("--enable-torch-symm-mem: TorchSymmMemCommunicator disables itself without "
                   "NVLink multicast")
        elif nbytes % 4 == 0 and nbytes < limit:
            if m.world in (4, 6, 8):
                return Route(TORCH_SYMM_MULTIMEM, "--enable-torch-symm-mem")
            return Route(TORCH_SYMM_2SHOT, f"--enable-torch-symm-mem: two_shot_all_reduce_ at "
                                           f"{m.world} ranks")
        else:
            why = "--enable-torch-symm-mem: message too large"
        return Route(NCCL, why + "; NCCL in place")
    if s.disable_custom_all_reduce:
        return Route(NCCL, "--disable-custom-all-reduce: NCCL in place")
    return Route(NCCL, "no custom allreduce for this group or size: NCCL in place")


def allgather_route(s: Settings, m: Machine) -> Route:
    """The path of the logits all-gather."""
    if m.world <= 1:
        return Route(NCCL, "one rank: SGLang skips the all-gather")
    if s.enable_mscclpp and m.world in MSCCLPP_WORLDS:
        return Route(MSCCLPP, f"--enable-mscclpp at {m.world} ranks")
    if s.enable_symm_mem:
        return Route(NCCL_SYMM, "--enable-symm-mem: pynccl all-gather on symmetric memory")
    return Route(NCCL, "pynccl all-gather")
