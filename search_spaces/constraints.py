"""Cross-knob constraints: combinations that fail, or that make a setting do nothing.

Each constraint reads a configuration with its composites expanded (composite.py) and
returns a reason, or None. A setting with no effect is refused too: it would only repeat
another point of the search, at the cost of a server launch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from search_spaces.domains import Value, selector_for

Config = Mapping[str, Value]


def _channels(config: Config) -> str | None:
    low, high = config.get("NCCL_MIN_NCHANNELS"), config.get("NCCL_MAX_NCHANNELS")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        return f"NCCL_MIN_NCHANNELS={low} > NCCL_MAX_NCHANNELS={high}"
    return None


def _speculative(config: Config) -> str | None:
    steps = config.get("--speculative-num-steps")
    topk = config.get("--speculative-eagle-topk")
    drafts = config.get("--speculative-num-draft-tokens")
    if isinstance(steps, int) and isinstance(topk, int) and isinstance(drafts, int) \
            and steps * topk + 1 < drafts:
        return f"speculative steps*topk+1 = {steps}*{topk}+1 < num-draft-tokens={drafts}"
    return None


STEPS, TOPK, DRAFTS = SHAPE = ("--speculative-num-steps", "--speculative-eagle-topk",
                               "--speculative-num-draft-tokens")


def partial_shape(config: Config) -> str | None:
    """SGLang (0.5.16 and 0.5.23, speculative_hook.py ``_handle_eagle_family``) chooses the
    whole shape itself when the steps are not given, and asserts that topk and the draft
    tokens are not given either: a partial shape never starts."""
    if config.get(STEPS) is None:
        given = [name for name in (TOPK, DRAFTS) if config.get(name) is not None]
        if given:
            return (f"{' and '.join(given)} without {STEPS}: SGLang asserts on a partial "
                    "speculative shape (it chooses all three or none)")
    return None


def resolved_alike(config: Config) -> dict[str, Value]:
    """The configuration as SGLang resolves it, where a rule makes two configurations run
    alike: with topk 1, the draft tokens become steps + 1 whatever was asked (SGLang 0.5.16
    and 0.5.23, speculative_hook.py: "speculative_num_draft_tokens is adjusted to
    speculative_num_steps + 1 when speculative_eagle_topk == 1")."""
    out = dict(config)
    steps = out.get(STEPS)
    if out.get(TOPK) == 1 and isinstance(steps, int) and out.get(DRAFTS) is not None:
        out[DRAFTS] = steps + 1
    return out


def _nvls(config: Config) -> str | None:
    algo = selector_for(config.get("NCCL_ALGO"), "allreduce") or []
    wants_nvls = any(t in ("nvls", "nvlstree") for t in algo)
    if wants_nvls and config.get("NCCL_NVLS_ENABLE") == 0:
        return "NCCL_ALGO selects NVLS but NCCL_NVLS_ENABLE=0"
    if config.get("--enable-nccl-nvls") and config.get("NCCL_NVLS_ENABLE") == 0:
        return "--enable-nccl-nvls with NCCL_NVLS_ENABLE=0"
    return None


def _symmetric_memory(config: Config) -> str | None:
    if config.get("--enable-symm-mem") and config.get("NCCL_CUMEM_ENABLE") == 0:
        return "--enable-symm-mem needs NCCL_CUMEM_ENABLE=1 (or unset)"
    return None


def _nvls_protocol(config: Config) -> str | None:
    algo = selector_for(config.get("NCCL_ALGO"), "allreduce") or []
    proto = selector_for(config.get("NCCL_PROTO"), "allreduce") or []
    if algo and all(t in ("nvls", "nvlstree") for t in algo) and proto and "simple" not in proto \
            and not proto[0].startswith("^"):
        return "NVLS allreduce runs the Simple protocol only"
    return None


def _pcie_ipc(config: Config) -> str | None:
    """pcie_ipc_ar.py: the bound matters only with the kernels on; ``eligible_group`` keeps
    them off when collectives are deterministic (SGLANG_USE_1STAGE_ALLREDUCE=1)."""
    enabled = config.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == 1
    if config.get("SGLANG_PCIE_IPC_MAX_NUMEL") is not None and not enabled:
        return "SGLANG_PCIE_IPC_MAX_NUMEL has no effect without SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"
    if enabled and config.get("SGLANG_USE_1STAGE_ALLREDUCE") == 1:
        return ("SGLANG_USE_1STAGE_ALLREDUCE=1 makes collectives deterministic, which keeps "
                "the PCIe-IPC allreduce off")
    return None


_V2_SIZES = ("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB",
             "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB",
             "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB")


def _custom_allreduce_v2(config: Config) -> str | None:
    """custom_all_reduce.py ``dispatch_custom_allreduce``: the v2 sizes need custom allreduce
    on and v2 chosen."""
    sized = next((name for name in _V2_SIZES if config.get(name) is not None), None)
    if sized is None:
        return None
    if config.get("--disable-custom-all-reduce") is True:
        return f"{sized} has no effect with --disable-custom-all-reduce"
    if config.get("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2") == 0:
        return f"{sized} has no effect with SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0"
    return None


def _decode_batches(config: Config) -> str | None:
    """arg_groups/memory_hook.py: an explicit decode batch list sets the largest decode batch
    to its maximum, whatever --cuda-graph-max-bs-decode says."""
    if config.get("--cuda-graph-bs-decode") is not None \
            and config.get("--cuda-graph-max-bs-decode") is not None:
        return "--cuda-graph-max-bs-decode has no effect with --cuda-graph-bs-decode"
    return None


def _split_data(config: Config) -> str | None:
    """NCCL's IB transport: split mode divides each message over the connection's queue pairs
    (round-robin otherwise); with one (NCCL_IB_QPS_PER_CONNECTION unset is 1) both modes send
    the same way, so the split is a repeat of the point without it."""
    qps = config.get("NCCL_IB_QPS_PER_CONNECTION")
    if config.get("NCCL_IB_SPLIT_DATA_ON_QPS") == 1 and qps in (None, 1):
        return ("NCCL_IB_SPLIT_DATA_ON_QPS=1 has no effect with one queue pair per connection "
                f"(NCCL_IB_QPS_PER_CONNECTION={'unset: 1' if qps is None else qps}); it needs 2 "
                "or more")
    return None


# A value that runs only beside another knob's (its rule above), with that knob: a search
# that tries the value alone sets the partner to the first of its values that lets it run.
PARTNER: dict[tuple[str, Value], str] = {
    ("NCCL_IB_SPLIT_DATA_ON_QPS", 1): "NCCL_IB_QPS_PER_CONNECTION",
}


CONSTRAINTS: tuple[Callable[[Config], str | None], ...] = (
    _channels, _speculative, partial_shape, _nvls, _symmetric_memory, _nvls_protocol, _pcie_ipc,
    _custom_allreduce_v2, _decode_batches, _split_data,
)


def violations(config: Config) -> list[str]:
    """Every constraint the (expanded) configuration breaks."""
    return [reason for constraint in CONSTRAINTS if (reason := constraint(config))]
