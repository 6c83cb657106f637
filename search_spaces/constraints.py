"""Cross-knob constraints: combinations that fail, or that make a setting do nothing.

Each constraint reads a configuration with its composites expanded (composite.py) and
returns a reason, or None. A setting with no effect is refused too: it would only repeat
another point of the search, at the cost of a server launch.

SGLang's own rules (the speculative shape, allreduce and decode-graph settings that do nothing
beside another) live with what servetune knows of SGLang's releases,
``launchers/sglang/release/`` (the floor below launchers/, so this room may read it); the
rules here are NCCL's and those that join NCCL's variables with SGLang's flags.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from launchers.sglang.release.combinations import custom_allreduce_v2, decode_batches, pcie_ipc
from launchers.sglang.release.speculative import (
    DRAFTS,
    SHAPE,
    STEPS,
    TOPK,
    partial_shape,
    resolved_alike,
    too_many_draft_tokens,
)
from search_spaces.domains import Value, selector_for

__all__ = ["CONSTRAINTS", "DRAFTS", "PARTNER", "SHAPE", "STEPS", "TOPK", "Config",
           "partial_shape", "resolved_alike", "violations"]

Config = Mapping[str, Value]


def _channels(config: Config) -> str | None:
    low, high = config.get("NCCL_MIN_NCHANNELS"), config.get("NCCL_MAX_NCHANNELS")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        return f"NCCL_MIN_NCHANNELS={low} > NCCL_MAX_NCHANNELS={high}"
    return None


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
    _channels, too_many_draft_tokens, partial_shape, _nvls, _symmetric_memory, _nvls_protocol,
    pcie_ipc, custom_allreduce_v2, decode_batches, _split_data,
)


def violations(config: Config) -> list[str]:
    """Every constraint the (expanded) configuration breaks."""
    return [reason for constraint in CONSTRAINTS if (reason := constraint(config))]
