"""The catalogue: every knob servetune knows, with its domain, its source and its default.

Facts behind the domains are in shared/reference/nccl.md and sglang.md; SGLang's rules are
quoted from the installed SGLang 0.5.23 (paths relative to ``sglang/srt/``). Defaults are
stated as NCCL or SGLang state them. ``launchers/sglang/levers.py`` holds this list against
the installed SGLang (``servetune knobs --check``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from launchers.sglang.release.speculative import SHAPE
from search_spaces.domains import (
    NCCL_ALGORITHMS,
    NCCL_PROTOCOLS,
    Checker,
    Value,
    boolean,
    int_in,
    int_list,
    interface_names,
    nccl_interfaces,
    nccl_selector,
    one_of,
    whole_number,
    word,
)
from search_spaces.knob import Group, Knob, KnobKind, Source

_FLAG_NAME = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
_TREE_GLOBAL = (
    "global NCCL_ALGO applies to every collective; since NCCL 2.24 a global Tree makes "
    "AllGather/ReduceScatter fail ('No algorithm/protocol available'), which kills CUDA "
    "graph capture. Prefer allreduce:tree"
)
_LL128_FORCED = "LL128 forced off NVLink skips NCCL's hardware check and can corrupt results"
_KB_MAX = 1 << 22  # 4 GiB in KB: far past any GPU's allreduce workspace


def _env(name: str, group: Group, help: str, choices: tuple[Value, ...], check: Checker,
         default: str, source: Source = Source.NCCL,
         warnings: Mapping[str, str] | None = None) -> Knob:
    return Knob(name, KnobKind.ENV, group, help, choices, check, dict(warnings or {}),
                source, default)


def _sglang_env(name: str, group: Group, help: str, choices: tuple[Value, ...], check: Checker,
                default: str) -> Knob:
    return _env(name, group, help, choices, check, default, Source.SGLANG_ENV)


def _flag(name: str, group: Group, help: str, choices: tuple[Value, ...], check: Checker,
          default: str, list_valued: bool = False) -> Knob:
    assert _FLAG_NAME.match(name), name
    return Knob(name, KnobKind.FLAG, group, help, choices, check, {}, Source.SGLANG_FLAG,
                default, list_valued)


_ON_OFF = (False, True)

_NCCL = [
    _env("NCCL_ALGO", Group.NCCL,
         "Algorithm. Per collective by default (allreduce:tree); a global value is flagged.",
         ("allreduce:ring", "allreduce:tree"), nccl_selector(NCCL_ALGORITHMS, "algorithm"),
         "auto: NCCL's cost model per size",
         warnings={"tree": _TREE_GLOBAL, "ring": "global NCCL_ALGO applies to every collective",
                   "nvls": "global NCCL_ALGO applies to every collective"}),
    _env("NCCL_PROTO", Group.NCCL, "Protocol: LL, LL128, Simple; per collective allowed.",
         ("LL", "LL128", "Simple"), nccl_selector(NCCL_PROTOCOLS, "protocol"),
         "every supported one (LL128 only over NVLink)",
         warnings={"ll128": _LL128_FORCED, "allreduce:ll128": _LL128_FORCED}),
    _env("NCCL_MIN_NCHANNELS", Group.NCCL, "Minimum channels (CTAs) per collective.",
         (1, 2, 4, 8, 16), int_in(1, 64), "NCCL picks per topology"),
    _env("NCCL_MAX_NCHANNELS", Group.NCCL, "Maximum channels (CTAs) per collective.",
         (1, 2, 4, 8, 16, 32), int_in(1, 64), "64"),
    _env("NCCL_BUFFSIZE", Group.NCCL,
         "Simple-protocol buffer per channel, bytes (power of two, 64 KiB..256 MiB).",
         (262144, 1048576, 2097152, 4194304, 8388608),
         int_in(65536, 268435456, power_of_two=True), "4194304 (4 MiB)"),
    _env("NCCL_NTHREADS", Group.NCCL, "Threads per CTA: a multiple of 32 in [64, 512].",
         (64, 128, 256, 512), int_in(64, 512, multiple_of=32), "512"),
    _env("NCCL_P2P_LEVEL", Group.NCCL,
         "Deepest topology level where GPUs use P2P (LOC disables P2P).",
         ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"),
         one_of("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"), "PXB"),
    _env("NCCL_GRAPH_MIXING_SUPPORT", Group.NCCL,
         "0 drops the extra events around NCCL kernels in CUDA graphs.", (0, 1), one_of(0, 1),
         "1"),
    _env("NCCL_CUMEM_ENABLE", Group.NCCL,
         "cuMem allocations (needed by NVLS and symmetric kernels). SGLang sets it when unset.",
         (0, 1), one_of(0, 1), "auto (NCCL >= 2.19); SGLang sets 0 unless symmetric memory is on"),
    _env("NCCL_NVLS_ENABLE", Group.NCCL,
         "NVLink SHARP / multicast. Pin to 0 where multicast is forbidden.",
         (0, 1), one_of(0, 1, 2), "2 (auto)"),
    _env("TORCH_SYMM_MEM_DISABLE_MULTICAST", Group.MULTICAST,
         "1 keeps PyTorch symmetric memory off NVLink multicast.", (0, 1), one_of(0, 1),
         "0 (multicast where the GPUs have it)", Source.TORCH),
    _env("NVSHMEM_DISABLE_NVLS", Group.MULTICAST,
         "1 keeps NVSHMEM off NVLink multicast.", (0, 1), one_of(0, 1),
         "0 (multicast where the GPUs have it)", Source.NVSHMEM),
]

# NCCL between nodes (its network transports: InfiniBand/RoCE verbs, or sockets): read from
# NCCL's own parameters (src/transport/net_ib/, net_socket.cc, graph/search.cc, graph/paths.cc;
# defaults as NCCL 2.2x declares them). Within one node NCCL sends nothing over the network, so
# an experiment of one node per trial leaves these out (tuner.setup). Which devices and which
# GID to use are properties of the site, not settings to search: pin them.
_GDR_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_NETWORK = [
    _env("NCCL_IB_QPS_PER_CONNECTION", Group.NETWORK,
         "InfiniBand/RoCE queue pairs per connection between two ranks: more paths through "
         "the fabric for one peer.", (1, 2, 4, 8), int_in(1, 128), "1"),
    _env("NCCL_IB_SPLIT_DATA_ON_QPS", Group.NETWORK,
         "1 splits each message over the connection's queue pairs; 0 uses them in turn. "
         "Only with 2 or more queue pairs (refused with one: no effect).",
         (0, 1), one_of(0, 1), "0"),
    _env("NCCL_NET_GDR_LEVEL", Group.NETWORK,
         "Deepest path between NIC and GPU where GPUDirect RDMA is used (LOC: never).",
         ("LOC", "PIX", "PXB", "PHB", "SYS"), one_of(*_GDR_LEVELS),
         "NCCL picks per NIC and GPU"),
    _env("NCCL_NET_GDR_READ", Group.NETWORK,
         "1 sends straight from GPU memory (GPUDirect RDMA reads); 0 stages sends in host "
         "memory.", (0, 1), one_of(0, 1), "auto"),
    _env("NCCL_CROSS_NIC", Group.NETWORK,
         "Rings and trees may use a different NIC on each node: 0 never (rail-local), 1 "
         "always, 2 when it helps.", (0, 1, 2), one_of(0, 1, 2), "2"),
    # Point-to-point only (send/recv: pipeline stages, all-to-all); collectives, a TP
    # allreduce included, do not read it, so the nccl-multinode preset leaves it out.
    _env("NCCL_NCHANNELS_PER_NET_PEER", Group.NETWORK,
         "Point-to-point only (send/recv, not collectives): channels to each remote peer over "
         "the network.", (1, 2, 4, 8), int_in(1, 64), "NCCL picks per topology"),
    _env("NCCL_PXN_DISABLE", Group.NETWORK,
         "1 stops sending through the NIC of an NVLink peer GPU (PXN).", (0, 1), one_of(0, 1),
         "0"),
    _env("NCCL_IB_ADAPTIVE_ROUTING", Group.NETWORK, "InfiniBand adaptive routing.", (0, 1),
         one_of(0, 1), "auto (on for InfiniBand, off for RoCE)"),
    _env("NCCL_SOCKET_NTHREADS", Group.NETWORK,
         "Socket transport (no InfiniBand): CPU threads per connection.", (1, 2, 4, 8),
         int_in(1, 16), "auto"),
    _env("NCCL_NSOCKS_PERTHREAD", Group.NETWORK,
         "Socket transport: sockets per thread (threads x sockets at most 64).", (1, 2, 4, 8),
         int_in(1, 64), "auto"),
    _env("NCCL_IB_HCA", Group.NETWORK,
         "Which InfiniBand/RoCE devices NCCL uses, e.g. mlx5_0:1,mlx5_1:1 (a site setting: "
         "pin it).", (), nccl_interfaces, "every device found"),
    _env("NCCL_SOCKET_IFNAME", Group.NETWORK,
         "Which IP interfaces NCCL bootstraps and sends sockets over, e.g. eth0 (a site "
         "setting: pin it).", (), nccl_interfaces, "any but lo and docker"),
    # SGLang's CPU group (gloo) spans the nodes too: a site that names NCCL's interface
    # names gloo's. PyTorch's ProcessGroupGloo reads it: exact names, comma-separated.
    _env("GLOO_SOCKET_IFNAME", Group.NETWORK,
         "Which IP interfaces PyTorch's gloo (SGLang's CPU group) uses, e.g. eth0 (a site "
         "setting: pin it beside NCCL_SOCKET_IFNAME).", (), interface_names,
         "the host name's address (loopback if it has none)", Source.TORCH),
    _env("NCCL_IB_GID_INDEX", Group.NETWORK,
         "RoCE: the GID index of the address NCCL uses (a site setting: pin it).", (),
         whole_number(-1, 1 << 16), "-1: NCCL picks"),
]

_SGLANG_FLAGS = [
    _flag("--enable-nccl-nvls", Group.MULTICAST, "NCCL NVLS (multicast) allreduce in SGLang.",
          _ON_OFF, boolean, "off"),
    _flag("--flashinfer-allreduce-fusion-backend", Group.FUSION,
          "FlashInfer allreduce+RMSNorm fusion backend.",
          ("auto", "trtllm"), one_of("auto", "trtllm", "mnnvl", "cutedsl"),
          "unset: auto-enabled for some architectures on SM90/SM100 with tp > 1"),
    _flag("--enforce-disable-flashinfer-allreduce-fusion", Group.FUSION,
          "Turn off the fusion SGLang auto-enables on SM90/SM100 with tp>1.",
          _ON_OFF, boolean, "off"),
    _flag("--enable-fused-moe-sum-all-reduce", Group.FUSION,
          "Triton MoE: the down-projection kernel adds the top-k experts into the output "
          "itself (top-k > 2; not int8/int4 weight-only). No TP collective.",
          _ON_OFF, boolean, "off"),
    _flag("--disable-custom-all-reduce", Group.ALLREDUCE,
          "Use NCCL instead of SGLang's custom allreduce kernel.", _ON_OFF, boolean,
          "off (custom allreduce where the GPUs allow it)"),
    _flag("--enable-torch-symm-mem", Group.ALLREDUCE, "PyTorch symmetric-memory allreduce.",
          _ON_OFF, boolean, "off"),
    _flag("--enable-symm-mem", Group.ALLREDUCE, "NCCL symmetric-memory kernels.",
          _ON_OFF, boolean, "off"),
    _flag("--enable-mscclpp", Group.ALLREDUCE, "MSCCL++ allreduce for small messages.",
          _ON_OFF, boolean, "off"),
    _flag("--enable-torch-compile", Group.GRAPH, "torch.compile the model.",
          _ON_OFF, boolean, "off"),
    _flag("--cuda-graph-max-bs-decode", Group.GRAPH, "Largest decode batch captured.",
          (8, 16, 32, 64), int_in(1, 1024), "sized by SGLang from GPU memory"),
    # arg_groups/memory_hook.py: an explicit list sets the largest decode batch to its maximum.
    _flag("--cuda-graph-bs-decode", Group.GRAPH,
          "Decode batch sizes captured in CUDA graphs, e.g. '1,2,4,8' (several argv words).",
          ("1,2,4,8", "1,2,4,8,16", "1,2,4,8,16,32"), int_list(1, 4096),
          "generated up to the largest decode batch", list_valued=True),
    _flag("--speculative-num-steps", Group.SPECULATIVE, "Draft steps per cycle.",
          (1, 2, 3, 4, 5), int_in(1, 16), "chosen by SGLang per model"),
    _flag("--speculative-eagle-topk", Group.SPECULATIVE, "Draft branches per step.",
          (1, 2, 4), int_in(1, 16), "chosen by SGLang per model"),
    _flag("--speculative-num-draft-tokens", Group.SPECULATIVE,
          "Tokens verified per cycle (verify batch = batch x this).",
          (2, 3, 4, 6, 8), int_in(1, 64), "chosen by SGLang per model"),
    # How the server starts, for benchmark runs (random weights, no warm-up); not searched by
    # any preset. SGLang's own parser checks the load format names.
    _flag("--load-format", Group.SETUP, "Weight format; 'dummy' loads random weights.",
          ("dummy",), word, "auto"),
    _flag("--speculative-draft-load-format", Group.SETUP,
          "The draft model's weight format; 'dummy' loads random weights.",
          ("dummy",), word, "the target's --load-format"),
    _flag("--skip-server-warmup", Group.SETUP, "Skip the server's warm-up request.",
          _ON_OFF, boolean, "off"),
]

# sglang/srt/environ.py, section "Deterministic inference and all-reduce"; each is read where
# its comment says. EnvBool values are written 0/1.
_SGLANG_ENV = [
    # distributed/device_communicators/pcie_ipc_ar.py: FlashInfer's PCIe-IPC kernels for hosts
    # whose GPUs talk through the CPU root complex; "tp" group, world size 2/4/8, bf16 only.
    _sglang_env("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", Group.ALLREDUCE,
                "FlashInfer PCIe-IPC allreduce (PCIe hosts without NVLink; 2, 4 or 8 GPUs).",
                (1,), one_of(0, 1), "0 (off)"),
    _sglang_env("SGLANG_PCIE_IPC_MAX_NUMEL", Group.ALLREDUCE,
                "Largest allreduce (elements) the PCIe-IPC kernels take; larger ones go to NCCL.",
                (262144, 1048576, 4194304), int_in(1, (1 << 31) - 1),
                "0: decode-sized (largest decode batch x draft tokens x hidden)"),
    # distributed/parallel_state.py _deterministic_collectives_enabled and
    # device_communicators/custom_all_reduce.py dispatch_custom_allreduce: the 1-stage kernel
    # on ROCm; on CUDA it turns deterministic collectives on (PCIe-IPC off).
    _sglang_env("SGLANG_USE_1STAGE_ALLREDUCE", Group.ALLREDUCE,
                "One-stage (deterministic) custom allreduce; ROCm's 1-stage kernel.",
                (0, 1), one_of(0, 1), "unset: on only with deterministic inference"),
    _sglang_env("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", Group.ALLREDUCE,
                "0 falls back from the JIT custom allreduce (v2) to the legacy kernel (v1).",
                (0,), one_of(0, 1), "1 (v2 where it can run: 2 ranks or full NVLink)"),
    # device_communicators/custom_all_reduce_v2.py: workspace caps in KB, read at import.
    _sglang_env("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB", Group.ALLREDUCE,
                "Custom allreduce v2: largest message (KB) per direction; larger go to NCCL.",
                (4096, 8192, 32768), int_in(1, _KB_MAX), "16384 (16 MiB)"),
    _sglang_env("SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB", Group.ALLREDUCE,
                "Custom allreduce v2: force the pull workspace (KB); 0 = push only.",
                (0, 1024, 8192), int_in(0, _KB_MAX), "unset: tuned per GPU and world size"),
    _sglang_env("SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB", Group.ALLREDUCE,
                "Custom allreduce v2: force the push workspace (KB), lifting one-shot push to it.",
                (256, 1024, 4096), int_in(1, _KB_MAX), "unset: tuned per GPU and world size"),
]

# Knobs that act on point-to-point traffic only (send/recv), never on a collective: a space
# that tunes a TP allreduce has no use for them.
POINT_TO_POINT_ONLY = frozenset({"NCCL_NCHANNELS_PER_NET_PEER"})

PRIMITIVES: dict[str, Knob] = {k.name: k for k in [*_NCCL, *_NETWORK, *_SGLANG_FLAGS,
                                                     *_SGLANG_ENV]}

# The speculative shape (steps, topk, draft tokens), as SGLang's rules name it
SPECULATIVE_KNOBS = SHAPE

# ---------------------------------------------------------------- expected effect

# How much one knob can change a verify pass, as a factor: what the default search reads the
# space in order of (the largest levers first). Three classes, from measurements:
# - LARGE (2x or more): which allreduce runs and whether GPUs talk peer to peer. The founding
#   case (peers.md: 8 PCIe GPUs, 25 of a 30 ms verify pass in NCCL allreduce) moves by
#   several times with the backend; NCCL_P2P_LEVEL=LOC sends every byte through the host.
# - MEDIUM (tens of percent): NCCL's protocol and algorithm (NCCL_PROTO=Simple cost 11.6% of
#   the pass on two H200s, BENCHMARKS.md), NVLink multicast, the speculative shape (it sets
#   both the accept length and the verify batch), CUDA graph coverage, torch.compile.
# - SMALL (about 1%): channels, buffer and thread counts, graph mixing, size thresholds
#   (4 channels 1.2%, NCCL_GRAPH_MIXING_SUPPORT=0 0.8-1.4% of the pass, BENCHMARKS.md).
# A knob not listed (an open knob a space declares) is taken as MEDIUM.
LARGE, MEDIUM, SMALL = 2.0, 1.1, 1.01
NOT_SEARCHED = 1.0  # how the server starts (weights, warm-up), not how it communicates
EFFECTS: dict[str, float] = {
    "allreduce-backend": LARGE,  # the composite (composite.py): one backend for the TP group
    "--disable-custom-all-reduce": LARGE,
    "--enable-torch-symm-mem": LARGE,
    "--enable-symm-mem": LARGE,
    "--enable-mscclpp": LARGE,
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": LARGE,
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": LARGE,
    "SGLANG_USE_1STAGE_ALLREDUCE": LARGE,
    "--flashinfer-allreduce-fusion-backend": LARGE,
    "--enforce-disable-flashinfer-allreduce-fusion": LARGE,
    "NCCL_P2P_LEVEL": LARGE,
    "NCCL_ALGO": MEDIUM,
    "NCCL_PROTO": MEDIUM,
    "NCCL_NVLS_ENABLE": MEDIUM,
    "--enable-nccl-nvls": MEDIUM,
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": MEDIUM,
    "NVSHMEM_DISABLE_NVLS": MEDIUM,
    "--enable-fused-moe-sum-all-reduce": MEDIUM,
    "--enable-torch-compile": MEDIUM,
    "--cuda-graph-max-bs-decode": MEDIUM,
    "--cuda-graph-bs-decode": MEDIUM,
    "--speculative-num-steps": MEDIUM,
    "--speculative-eagle-topk": MEDIUM,
    "--speculative-num-draft-tokens": MEDIUM,
    "NCCL_MIN_NCHANNELS": SMALL,
    "NCCL_MAX_NCHANNELS": SMALL,
    "NCCL_BUFFSIZE": SMALL,
    "NCCL_NTHREADS": SMALL,
    "NCCL_GRAPH_MIXING_SUPPORT": SMALL,
    "NCCL_CUMEM_ENABLE": SMALL,
    "SGLANG_PCIE_IPC_MAX_NUMEL": SMALL,
    "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": SMALL,
    "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB": SMALL,
    "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB": SMALL,
    "--load-format": NOT_SEARCHED,
    "--speculative-draft-load-format": NOT_SEARCHED,
    "--skip-server-warmup": NOT_SEARCHED,
    "weights": NOT_SEARCHED,
}
