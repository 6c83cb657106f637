"""Landscapes whose failures depend on the configuration, not on one value (issue 31). Made
up, with numbers of this file's own, from patterns real SGLang campaigns show:

- ``conditional-oom``: a decode CUDA-graph batch of 64 runs out of memory (``cuda_oom``) at
  SGLang's default memory fraction and at 0.85, and is the optimum at 0.8 (+16% over the
  baseline; at 0.75 it runs but the smaller KV pool costs 3%). Alone, 32 is the best batch.
- ``refused-alone``: the speculative shape on SGLang 0.5.16, which refuses
  ``--speculative-num-steps`` without ``--speculative-eagle-topk`` (a TypeError in its
  resolution, before any launch) and asserts on topk or draft tokens without steps (the
  space's rule, constraints.partial_shape). SGLang resolves the baseline to (5, 4, 8); the
  optimum is (3, 4, 4): steps 3 beside the baseline's topk, then fewer draft tokens.

Each is a ``benchmarks.landscapes.Landscape``; ``refused-alone`` also carries the workload's
checks (``refusal``) and its resolution (``resolved``), which a search is given as
``build_search(refusal=..., resolved=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.landscapes import Config, Landscape, nccl_token
from search_spaces.constraints import DRAFTS, STEPS, TOPK
from search_spaces.knobs import Value
from search_spaces.space import from_mapping
from tuner.search.keys import Refusal, Resolved

SOURCE = "benchmarks/landscapes_failures.py"
MEM, GRAPH_BS = "--mem-fraction-static", "--cuda-graph-max-bs-decode"
FUSION = "--flashinfer-allreduce-fusion-backend"


@dataclass(frozen=True)
class WorkloadLandscape(Landscape):
    """A landscape with the workload's own checks and resolution, asked on the driver."""

    refusal: Refusal | None = field(default=None, repr=False)
    resolved: Resolved | None = field(default=None, repr=False)


# ---------------------------------------------------------------- conditional OOM

OOM_SPACE: dict[str, Any] = {
    "name": "conditional-oom",
    "knobs": {
        GRAPH_BS: [16, 32, 64],
        MEM: {"flag": "str", "values": ["0.85", "0.8", "0.75"]},
        "NCCL_PROTO": ["LL", "LL128", "Simple"],
        "NCCL_MAX_NCHANNELS": [4, 8, 16],
        FUSION: ["auto", "trtllm"],
    },
    "pins": {"NCCL_NVLS_ENABLE": 0},
}
GRAPH_GAIN = {None: 1.0, 16: 0.97, 32: 1.04, 64: 1.18}  # decode batches that replay a graph
MEM_GAIN = {None: 1.0, "0.85": 0.995, "0.8": 0.985, "0.75": 0.955}  # the KV pool shrinks
FITS_64 = {"0.8", "0.75"}  # batch 64's graphs fit beside the KV pool only there
PROTO_GAIN = {"ll": 1.03, "ll128": 1.01, "simple": 1.0}
CHANNEL_GAIN = {None: 1.0, 4: 0.995, 8: 1.006, 16: 1.0}
FUSION_GAIN = {None: 1.0, "auto": 1.05, "trtllm": 1.045}


def oom_tok_s(config: Config) -> float | None:
    batch = config.get(GRAPH_BS)
    memory = config.get(MEM)
    if batch == 64 and memory not in FITS_64:
        return None
    proto = nccl_token(config.get("NCCL_PROTO"), "allreduce", "simple")
    return (400.0 * GRAPH_GAIN[batch] * MEM_GAIN[memory] * PROTO_GAIN[proto]  # type: ignore[index]
            * CHANNEL_GAIN[config.get("NCCL_MAX_NCHANNELS")]  # type: ignore[index]
            * FUSION_GAIN[config.get(FUSION)])  # type: ignore[index]


def oom_failure(config: Config) -> str:
    return "cuda_oom"


# ---------------------------------------------------------------- a lever refused alone

SPEC_SPACE: dict[str, Any] = {
    "name": "refused-alone",
    "knobs": {STEPS: [1, 2, 3, 5], TOPK: [1, 4], DRAFTS: [2, 4, 8, 16],
              "NCCL_PROTO": ["LL", "Simple"]},
    "pins": {"NCCL_NVLS_ENABLE": 0},
}
BASELINE_SHAPE = (5, 4, 8)  # what SGLang resolves for this model when no steps are given
ACCEPT = {1: 0.7, 2: 0.76, 4: 0.8}  # per drafted step, by topk


def refusal_0516(config: Mapping[str, Value]) -> str | None:
    """SGLang 0.5.16's resolution: steps without topk is a TypeError."""
    if config.get(STEPS) is not None and config.get(TOPK) is None:
        return ("SGLang's checks rejected the command: TypeError: '>' not supported between "
                "instances of 'NoneType' and 'int'")
    return None


def shape(config: Config) -> tuple[int, int, int]:
    """The speculative shape SGLang runs: its own without steps; with topk 1, draft tokens
    steps + 1; draft tokens unset: steps x topk + 1, at most 8."""
    steps, topk, drafts = config.get(STEPS), config.get(TOPK), config.get(DRAFTS)
    if not isinstance(steps, int):
        return BASELINE_SHAPE
    k = topk if isinstance(topk, int) else 1
    if k == 1:
        return steps, 1, steps + 1
    return steps, k, drafts if isinstance(drafts, int) else min(steps * k + 1, 8)


def resolved_shape(config: Mapping[str, Value]) -> dict[str, Value]:
    return dict(zip((STEPS, TOPK, DRAFTS), shape(config), strict=True))


def spec_tok_s(config: Config) -> float | None:
    if refusal_0516(config):
        return None
    steps, topk, drafts = shape(config)
    accept = 1.0 + sum(ACCEPT[topk] ** i for i in range(1, min(steps, drafts - 1) + 1))
    verify_ms = 1.2 + 0.04 * drafts * (1.0 if topk == 1 else 1.5) + 0.45 * steps
    proto = {"ll": 0.97, "simple": 1.0}[nccl_token(config.get("NCCL_PROTO"), "allreduce",
                                                   "simple")]
    return accept * 1000.0 / (verify_ms * proto)


def spec_failure(config: Config) -> str:
    return "invalid_config"


# ---------------------------------------------------------------- by name

NAMES = ("conditional-oom", "refused-alone")


def failure_landscape(name: str) -> Landscape:
    if name == "conditional-oom":
        return Landscape(name, from_mapping(OOM_SPACE, SOURCE), oom_tok_s,
                         "decode graph batch 64 OOMs at the default memory fraction, is the "
                         "optimum at 0.8", failure=oom_failure)
    if name == "refused-alone":
        return WorkloadLandscape(name, from_mapping(SPEC_SPACE, SOURCE), spec_tok_s,
                                 "SGLang 0.5.16 refuses steps without topk; optimum (3, 4, 4)",
                                 failure=spec_failure, refusal=refusal_0516,
                                 resolved=resolved_shape)
    raise ValueError(f"unknown failure landscape {name!r}; landscapes: {', '.join(NAMES)}")
