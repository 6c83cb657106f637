"""Communication levers of SGLang that servetune does not search, each with its reason.

Every lever ``levers.is_communication_lever`` selects from the installed SGLang (0.5.23 when
written) is either a catalogue knob or listed here; the contract test holds both lists
against SGLang. Flags are named by their first spelling. Where a reason cites SGLang, the path
is relative to ``sglang/srt/``.
"""

from __future__ import annotations

_ROCM = "ROCm only (AMD's aiter kernels); servetune tunes NVIDIA GPUs"
_STARTUP = "startup plumbing, no effect on a served step"
_DP = "data-parallel attention / DP MoE only (--dp-size > 1); servetune tunes TP groups"
_PP = "pipeline parallelism only; servetune tunes TP groups"
_MODEL = "one model family's own kernels ({}), not a general lever"

NOT_SEARCHED: dict[str, str] = {
    # ---- flags
    "--nccl-port": f"the port of NCCL's bootstrap: {_STARTUP}",
    "--dist-init-addr": f"the address of torch.distributed's rendezvous: {_STARTUP}",
    "--pre-warm-nccl": "creates NCCL communicators at startup to cut the first requests' "
                       "TTFT; no effect on a warmed-up step, which is what a trial measures",
    "--dcp-comm-backend": "decode context parallelism only (--dcp-size > 1)",
    "--enable-quant-communications": "INT8 TP communication, NPU only "
                                     "(GroupCoordinator.quant_all_reduce needs torch_npu)",
    "--enable-aiter-allreduce-fusion": _ROCM,
    "--disable-aiter-allreduce-fusion-in-prefill": _ROCM,
    "--disable-aiter-allreduce-fusion-in-decode": _ROCM,
    "--disable-flashinfer-cutlass-moe-fp4-allgather": "FP4 MoE checkpoints with FlashInfer's "
                                                      "CUTLASS MoE runner only",
    "--cuda-graph-max-bs-prefill": "prefill CUDA graphs: the verify pass runs in the decode "
                                   "graphs, which --cuda-graph-max-bs-decode sizes",
    "--cuda-graph-bs-prefill": "prefill CUDA graphs (see --cuda-graph-max-bs-prefill)",
    "--speculative-dflash-block-size": "DFLASH's name for --speculative-num-draft-tokens, "
                                       "which the catalogue searches",
    "--speculative-dspark-block-size": "DSPARK only: its draft block size",
    # ---- SGLang env
    "SGLANG_DEBUG_SYMM_MEM": "debug checks of the symmetric-memory pool",
    "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE": "sizes the NCCL symmetric-memory pool up front "
                                        "(-1: grows on demand); memory, not speed",
    "SGLANG_DETERMINISTIC_NCCL_NCHANNELS": "read only with --enable-deterministic-inference "
                                           "(arg_groups/attention_hook.py); NCCL_MAX_NCHANNELS "
                                           "is searched directly",
    "SGLANG_DP_USE_REDUCE_SCATTER": _DP,
    "SGLANG_SCHEDULER_SKIP_ALL_GATHER": _DP + " (the scheduler's CPU all-gather)",
    "SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH": _DP + " (scheduler batch sync)",
    "SGLANG_PP_COMM_OVERLAP": _PP,
    "SGLANG_PP_SKIP_PURE_CHUNKED_OUTPUT_COMM": _PP,
    "SGLANG_M3_ALLOW_CUSTOM_AR": _MODEL.format("MiniMax-M3 on ROCm"),
    "SGLANG_ENABLE_MUSE_SPARK_FINALIZE_AR": _MODEL.format("Muse Spark"),
    "SGLANG_K3_AR_FUSION": _MODEL.format("Kimi K3, MNNVL on SM100"),
    "SGLANG_K3_SP_COLLECTIVE": _MODEL.format("Kimi K3, MNNVL on SM100"),
    "SGLANG_OPT_USE_INKLING_CUSTOM_AR": _MODEL.format("Inkling"),
    "SGLANG_OPT_USE_INKLING_FUSED_AR_SCONV": _MODEL.format("Inkling"),
    "SGLANG_OPT_USE_INKLING_FUSED_AR_SCONV_NORM": _MODEL.format("Inkling"),
    "SGLANG_OPT_USE_INKLING_FUSED_AR_SHARED": _MODEL.format("Inkling"),
}
