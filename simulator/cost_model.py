"""The stand-in server's timing: a pure function of the settings, with a known optimum.

Part of the simulator: a model, never a measurement of SGLang. It models one verify-bound
speculative-decoding server on an 8-GPU PCIe node, shaped after the field case in
shared/reference/peers.md (a ~30 ms verify pass, most of it NCCL allreduce): per cycle the
target model verifies ``draft_tokens`` tokens per request with ``N_ALLREDUCE`` small
allreduces, and the draft model runs ``num_steps`` steps.

What is faster here (the known answer a search should find):
- allreduce:tree < ring (auto = ring); LL < LL128 < Simple (auto ~ Simple);
- few channels (4 best; unset = 32), a small buffer (256 KiB best; unset = 4 MiB),
  NCCL_NTHREADS 256, NCCL_GRAPH_MIXING_SUPPORT=0, NCCL_P2P_LEVEL=SYS;
- FlashInfer allreduce fusion (trtllm > auto), MSCCL++, torch.compile a little;
- a GLOBAL ``NCCL_ALGO=Tree`` (no ``allreduce:`` prefix) with tp > 1 crashes CUDA graph
  capture, as NCCL >= 2.24 does; ``--disable-custom-all-reduce`` has no effect (the custom
  kernel is not used on >2 PCIe GPUs anyway).
Times are "model" milliseconds; the stand-in sleeps ``ms * time_scale``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from search_spaces import knobs
from search_spaces.knobs import CATALOGUE, KnobKind, Value

N_ALLREDUCE = 122  # per verify pass: 2 per layer of a 61-layer model
DRAFT_ALLREDUCE = 2  # per draft step (one tensor-parallel draft layer)
OVERHEAD_MS = 0.5  # scheduling + sampling per cycle
NO_GRAPH_MS = 3.0  # extra launch overhead when a batch is larger than the captured graphs
BASE_COMPUTE_MS = 36.0  # verify compute for one token at tp 1 (weight reads)
PREFILL_MS = 2.0  # per new request
P_ACCEPT = 0.72  # chance a greedy draft token is accepted, topk 1
DEFAULT_SPEC = (3, 1, 4)  # steps, topk, draft tokens: SGLang's EAGLE3 choice when unset
DEFAULT_GRAPH_MAX_BS = 32

_ALGO_US = {"ring": 60.0, "tree": 34.0, "nvls": 45.0, "nvlstree": 50.0, "pat": 70.0,
            "collnetdirect": 60.0, "collnetchain": 60.0}
_PROTO = {"ll": 1.0, "ll128": 1.35, "simple": 2.1}
_AUTO_PROTO = 1.8
_P2P_US = {"LOC": 4.0, "NVL": 2.0, "PIX": 1.0, "PXB": 0.0, "PHB": -1.0, "SYS": -1.5}
_FUSION = {"trtllm": 0.8, "auto": 0.85}


@dataclass(frozen=True)
class SpecParams:
    algorithm: str | None = None
    num_steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None

    @property
    def on(self) -> bool:
        return self.algorithm is not None

    def resolved(self) -> tuple[int, int, int]:
        """(steps, topk, draft tokens) with SGLang-like defaults; (0, 1, 1) when off."""
        if not self.on:
            return 0, 1, 1
        steps, topk, drafts = DEFAULT_SPEC
        if self.num_steps is not None and self.topk == 1:  # SGLang: draft = steps + 1
            return self.num_steps, 1, self.num_steps + 1
        return (self.num_steps or steps, self.topk or topk, self.draft_tokens or drafts)

    @property
    def partial(self) -> bool:
        """A shape SGLang asserts on: topk or draft tokens without the steps."""
        return self.on and self.num_steps is None and (
            self.topk is not None or self.draft_tokens is not None)


@dataclass(frozen=True)
class Timing:
    verify_ms: float
    draft_ms: float
    accept_length: float
    overhead_ms: float = OVERHEAD_MS
    graph: bool = True  # whether the batch ran in a captured CUDA graph

    @property
    def cycle_ms(self) -> float:
        return self.verify_ms + self.draft_ms + self.overhead_ms

    def tok_s(self, batch: int = 1) -> float:
        """Output tokens per (model) second for the whole batch."""
        return batch * self.accept_length * 1000.0 / self.cycle_ms


@overload
def strtoll(text: str) -> int: ...
@overload
def strtoll(text: None) -> None: ...
@overload
def strtoll(text: str | None) -> int | None: ...
def strtoll(text: str | None) -> int | None:
    """NCCL's strtoll: the leading integer ("4M" -> 4), 0 for text, None when unset."""
    if text is None:
        return None
    digits = ""
    for ch in text.strip():
        if ch.isdigit() or (not digits and ch in "+-"):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return 0


def _first(value: str | None, collective: str) -> str | None:
    tokens = knobs.selector_for(value, collective)
    if not tokens:
        return None
    plain = [t for t in tokens if not t.startswith("^")]
    return plain[0] if plain else None


def crash_reason(env: Mapping[str, str], tp: int) -> str | None:
    """Why startup fails for these settings, or None."""
    algo = env.get("NCCL_ALGO")
    if tp > 1 and algo and knobs.is_global_selector(algo) and "tree" in algo.lower().split(","):
        return "global-tree"
    return None


def allreduce_us(env: Mapping[str, str], flags: Mapping[str, Value]) -> float:
    """One small allreduce between the tp ranks, in microseconds."""
    algo = _first(env.get("NCCL_ALGO"), "allreduce")
    proto = _first(env.get("NCCL_PROTO"), "allreduce")
    us = _ALGO_US.get(algo or "ring", 60.0) * (_PROTO.get(proto, _AUTO_PROTO) if proto else _AUTO_PROTO)
    channels = max(1, min(64, strtoll(env.get("NCCL_MAX_NCHANNELS")) or 32))
    us += 0.8 * channels + 8.0 / channels
    low = strtoll(env.get("NCCL_MIN_NCHANNELS"))
    us += 0.5 * max(0, (low or 1) - 1)
    buff = strtoll(env.get("NCCL_BUFFSIZE")) or 4194304
    ratio = math.log2(max(buff, 1) / 262144)
    us += 3.0 * ratio if ratio >= 0 else 2.0 * -ratio
    threads = strtoll(env.get("NCCL_NTHREADS")) or 512
    us += 1.5 * abs(math.log2(max(threads, 1) / 256))
    if env.get("NCCL_GRAPH_MIXING_SUPPORT", "1").strip() == "0":
        us -= 2.0
    us += _P2P_US.get(env.get("NCCL_P2P_LEVEL", "PXB").upper(), 0.0)
    factor = 1.0
    backend = flags.get("--flashinfer-allreduce-fusion-backend")
    if isinstance(backend, str) and not flags.get("--enforce-disable-flashinfer-allreduce-fusion"):
        factor *= _FUSION.get(backend, 1.0)
    if flags.get("--enable-mscclpp"):
        factor *= 0.92
    if flags.get("--enable-symm-mem") and env.get("NCCL_CUMEM_ENABLE", "1") != "0":
        factor *= 0.95
    return max(5.0, us) * factor


def _accept_length(spec: SpecParams) -> float:
    steps, topk, drafts = spec.resolved()
    if not spec.on:
        return 1.0
    depth = max(0, min(steps, drafts - 1))
    if depth == 0:
        return 1.0
    width = min(topk, max(1, (drafts - 1) // depth))
    p = 1.0 - (1.0 - P_ACCEPT) * 0.7 ** math.log2(width)
    return 1.0 + sum(p ** i for i in range(1, depth + 1))


def timing(env: Mapping[str, str], flags: Mapping[str, Value], tp: int, spec: SpecParams,
           batch: int = 1) -> Timing:
    """Verify, draft and accept length for one cycle at ``batch`` concurrent requests."""
    steps, topk, drafts = spec.resolved()
    ar_ms = allreduce_us(env, flags) / 1000.0 if tp > 1 else 0.0
    tokens = drafts * max(1, batch)
    compute = BASE_COMPUTE_MS / tp * (1.0 + 0.03 * (tokens - 1))
    if flags.get("--enable-torch-compile"):
        compute *= 0.95
    verify = compute + N_ALLREDUCE * ar_ms * (1.0 + 0.02 * (tokens - 1))
    draft = steps * (0.9 * (1.0 + 0.15 * (topk - 1)) + DRAFT_ALLREDUCE * ar_ms)
    max_bs = flags.get("--cuda-graph-max-bs-decode")
    graph = batch <= (max_bs if isinstance(max_bs, int) else DEFAULT_GRAPH_MAX_BS)
    overhead = OVERHEAD_MS + (0.0 if graph else NO_GRAPH_MS)
    return Timing(verify, draft, _accept_length(spec), overhead, graph)


def noisy(value: float, noise: float, rng: random.Random) -> float:
    """``value`` times (1 + noise * N(0, 1)), kept positive."""
    if noise <= 0:
        return value
    return value * max(0.1, 1.0 + noise * rng.gauss(0.0, 1.0))


# ---------------------------------------------------------------- servetune configs


def split_config(config: Mapping[str, Value]) -> tuple[dict[str, str], dict[str, Value]]:
    """A servetune configuration as (env, flags), rendered like the launcher renders it."""
    env: dict[str, str] = {}
    flags: dict[str, Value] = {}
    for name, value in knobs.expand_config(config).items():
        knob = CATALOGUE[name]
        if knob.kind is KnobKind.ENV:
            text = knob.render_env(value)
            if text is not None:
                env[name] = text
        elif value is not None and value is not False:
            flags[name] = value
    return env, flags


def config_timing(config: Mapping[str, Value], tp: int = 8,
                  speculative_algorithm: str | None = "EAGLE3", batch: int = 1) -> Timing | None:
    """Timing of a servetune configuration; None when it would crash at startup."""
    env, flags = split_config(config)
    if crash_reason(env, tp):
        return None

    def num(name: str) -> int | None:
        value = flags.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    spec = SpecParams(speculative_algorithm, num("--speculative-num-steps"),
                      num("--speculative-eagle-topk"), num("--speculative-num-draft-tokens"))
    return timing(env, flags, tp, spec, batch)


def optimum(space_domains: Mapping[str, Sequence[Value]], pins: Mapping[str, Value] | None = None,
            tp: int = 8, speculative_algorithm: str | None = "EAGLE3", batch: int = 1
            ) -> tuple[dict[str, Value], float]:
    """The best valid configuration of a space (exhaustive) and its model tok/s.

    Ties go to the first point in domain order (the unset values come first)."""
    names = list(space_domains)
    best: tuple[dict[str, Value], float] | None = None
    for values in itertools.product(*(space_domains[n] for n in names)):
        config = {**dict(zip(names, values, strict=True)), **(pins or {})}
        if knobs.check_config(config):
            continue
        result = config_timing(config, tp, speculative_algorithm, batch)
        if result is None:
            continue
        speed = result.tok_s(batch)
        if best is None or speed > best[1] * (1 + 1e-12):
            best = (config, speed)
    if best is None:
        raise ValueError("no valid configuration in the space")
    return best
