"""Landscapes for the search-efficiency benchmark: a space, a noise-free metric per point, and
the optimum found by evaluating every valid point.

Cost-model landscapes (the stand-in's ``simulator/cost_model.py``, tok/s at tp 8 with
EAGLE3; separable: every knob's best value is the same whatever the others are):
- ``bench``: verify-campaign's four stages, two values per knob besides the default (243
  points, one of them within 2% of the optimum);
- ``bench+tree``: the same plus a global ``NCCL_ALGO=Tree``, which always crashes (324 points);
- ``verify-campaign``: the shipped preset (51,840 points).

Toy-server landscapes (``ToyServer`` below), all on one space: NCCL algorithm and protocol |
channels | FlashInfer fusion | draft tokens, in verify-campaign's stage order (576 points):
- ``separable``: no interaction, as the cost model;
- ``interact``: each protocol has its own best channel count (LL few, Simple many) and fusion
  turns Tree from the best algorithm into the worse one;
- ``wrong-order``: draft tokens (the last stage) matter most, and they set the allreduce
  message size, which decides the best protocol (LL for 4 tokens, LL128 for 8);
- ``plateau``: separable with small communication effects: many points within 2%.

``table:PATH``: measured points (benchmarks/landscape_table.py); the space holds only them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, from_mapping, load

Config = Mapping[str, Value]
Evaluate = Callable[[Config], float | None]  # None: the configuration fails
Failure = Callable[[Config], str]  # the failure kind of a configuration that fails
CLOSE = 0.02  # "within 2% of the optimum"
CRASH_KIND = "graph_capture"  # what servetune calls the stand-in's crash (a global Tree)


def crash(config: Config) -> str:
    return CRASH_KIND


@dataclass(frozen=True)
class Landscape:
    name: str
    space: SearchSpace
    evaluate: Evaluate = field(repr=False)
    about: str
    metric: str = "tok/s"
    mode: str = "max"
    failure: Failure = field(default=crash, repr=False)  # the kind, where evaluate is None

    @cached_property
    def _survey(self) -> tuple[list[float], dict[tuple[str, str], int], int]:
        """Every valid point once: the metrics of those that run, and per setting how many
        of its points run (-1: the setting is on no valid point)."""
        values: list[float] = []
        running: dict[tuple[str, str], int] = {}
        count = 0
        for point in valid_points(self.space):
            count += 1
            value = self.evaluate(point)
            for name in self.space.domains:
                key = (name, repr(point[name]))
                running[key] = running.get(key, 0) + (value is not None)
            if value is not None:
                values.append(value)
        return values, running, count

    @property
    def values(self) -> list[float]:
        """The metric of every valid point that does not fail."""
        return self._survey[0]

    @property
    def valid(self) -> int:
        return self._survey[2]

    @cached_property
    def culprits(self) -> frozenset[tuple[str, Value]]:
        """Settings that fail wherever they are: every valid point with them fails."""
        return frozenset((name, value) for name, values in self.space.domains.items()
                         for value in values
                         if self._survey[1].get((name, repr(value)), -1) == 0)

    def innocent(self, name: str, value: Value) -> bool:
        """A setting some valid point with it runs (ruling it out would be wrong)."""
        return self._survey[1].get((name, repr(value)), 0) > 0

    @cached_property
    def optimum(self) -> float:
        return max(self.values) if self.mode == "max" else min(self.values)

    def close(self, value: float | None) -> bool:
        """Whether ``value`` is within 2% of the optimum."""
        if value is None:
            return False
        if self.mode == "max":
            return value >= (1.0 - CLOSE) * self.optimum
        return value <= (1.0 + CLOSE) * self.optimum

    @cached_property
    def within(self) -> int:
        return sum(self.close(v) for v in self.values)

    def staged_pass(self) -> float | None:
        """The metric where one noise-free pass of the stages ends: each stage takes its best
        point with the earlier winners pinned (what staged search does when its stages are
        searched exhaustively and measured exactly). None: the space has no stages."""
        if not self.space.stages:
            return None
        point = self.space.baseline()
        sign = 1.0 if self.mode == "max" else -1.0
        for stage in self.space.stages:
            scored = [(sign * v, p) for p in valid_points(self.space.stage_space(stage, point))
                      if (v := self.evaluate(p)) is not None]
            if scored:
                point = max(scored, key=lambda s: s[0])[1]
        return self.evaluate(point)


def valid_points(space: SearchSpace) -> Iterator[dict[str, Value]]:
    return (p for p in space.grid() if not space.validate(p))


# ---------------------------------------------------------------- the stand-in's cost model

TP = 8
SPEC_ALGORITHM = "EAGLE3"
STAGES = [
    {"name": "allreduce", "knobs": ["NCCL_ALGO", "NCCL_PROTO"]},
    {"name": "channels", "knobs": ["NCCL_MAX_NCHANNELS"]},
    {"name": "fusion", "knobs": ["--flashinfer-allreduce-fusion-backend"]},
    {"name": "speculative", "knobs": ["--speculative-num-draft-tokens"]},
]
BENCH_SPACE: dict[str, Any] = {
    "name": "bench",
    "description": "verify-campaign's four stages, two values per knob besides the default.",
    "knobs": {
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"],
        "NCCL_PROTO": ["LL", "Simple"],
        "NCCL_MAX_NCHANNELS": [4, 16],
        "--flashinfer-allreduce-fusion-backend": ["auto", "trtllm"],
        "--speculative-num-draft-tokens": [3, 6],
    },
    # steps pinned (the cost model's default, 3): draft tokens alone are a partial shape
    "pins": {"NCCL_NVLS_ENABLE": 0, "--speculative-num-steps": 3},
    "stages": STAGES,
}
TREE = ("NCCL_ALGO", "Tree")


def cost_model_tok_s(config: Config) -> float | None:
    """The cost model's tok/s at tp 8 with EAGLE3; None when the stand-in would crash."""
    from simulator.cost_model import config_timing

    timing = config_timing(config, TP, SPEC_ALGORITHM)
    return None if timing is None else timing.tok_s()


def _cost_model(name: str) -> Landscape:
    source = "benchmarks/landscapes.py"
    if name == "bench":
        space = from_mapping(BENCH_SPACE, source)
        about = "the stand-in's cost model (separable)"
    elif name == "bench+tree":
        knobs_ = {**BENCH_SPACE["knobs"],
                  "NCCL_ALGO": [*BENCH_SPACE["knobs"]["NCCL_ALGO"], TREE[1]]}
        space = from_mapping({**BENCH_SPACE, "name": name, "knobs": knobs_}, source)
        about = "bench plus a global NCCL_ALGO=Tree that always crashes"
    else:
        space = load(name)
        about = "the shipped preset on the stand-in's cost model (separable)"
    return Landscape(name, space, cost_model_tok_s, about)


# ---------------------------------------------------------------- a toy verify server

WIDE_SPACE: dict[str, Any] = {
    "name": "wide",
    "knobs": {
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"],
        "NCCL_PROTO": ["LL", "LL128", "Simple"],
        "NCCL_MAX_NCHANNELS": [4, 8, 16],
        "--flashinfer-allreduce-fusion-backend": ["auto", "trtllm"],
        "--speculative-num-draft-tokens": [3, 6, 8],
    },
    "pins": {"NCCL_NVLS_ENABLE": 0, "--speculative-num-steps": 3},  # as BENCH_SPACE's
    "stages": STAGES,
}
# protocol -> (latency us, us per verified token: the message grows with the draft tokens)
PROTO_US = {"ll": (6.0, 3.5), "ll128": (16.0, 1.5), "simple": (30.0, 0.8)}
# protocol -> (us per channel, us x channels): a c + b / c, so each has its own best count
CHANNEL_US = {"ll": (0.6, 4.0), "ll128": (0.3, 20.0), "simple": (0.1, 60.0)}
ALGO = {"ring": 1.0, "tree": 0.8}
TREE_FUSED = 1.25  # with fusion on, Tree's extra hop costs more than it saves
FUSION = {"auto": 0.8, "trtllm": 0.7}
UNSET_ALGO, UNSET_PROTO, UNSET_CHANNELS, UNSET_DRAFTS = "ring", "simple", 32, 4  # what unset means here
P_ACCEPT = 0.8  # per draft token, chained
COMPUTE_MS = 4.5  # verify compute for one token at tp 8
DRAFT_MS = 3.0
OVERHEAD_MS = 0.5


def nccl_token(value: Value, collective: str, fallback: str) -> str:
    """The first token an NCCL_ALGO/PROTO value selects for ``collective`` (else ``fallback``)."""
    tokens = [t for t in knobs.selector_for(value if isinstance(value, str) else None,
                                            collective) or [] if not t.startswith("^")]
    return tokens[0] if tokens else fallback


@dataclass(frozen=True)
class ToyServer:
    """tok/s of a verify-bound speculative server: accept length / (verify + draft + overhead),
    verify = compute + ``n_allreduce`` small allreduces. With every interaction off, each knob's
    best value is the same whatever the others are (checked in the tests)."""

    proto_channels: bool = False  # else every protocol prices channels as LL128 does
    fusion_algo: bool = False  # else Tree keeps its advantage under fusion
    proto_drafts: bool = False  # else every protocol is priced at the default 4 tokens
    n_allreduce: int = 122

    def allreduce_us(self, config: Config) -> float:
        algo = nccl_token(config.get("NCCL_ALGO"), "allreduce", UNSET_ALGO)
        proto = nccl_token(config.get("NCCL_PROTO"), "allreduce", UNSET_PROTO)
        channels = config.get("NCCL_MAX_NCHANNELS")
        c = channels if isinstance(channels, int) else UNSET_CHANNELS
        latency, per_token = PROTO_US[proto]
        tokens = self.drafts(config) if self.proto_drafts else UNSET_DRAFTS
        per_channel, spread = CHANNEL_US[proto if self.proto_channels else "ll128"]
        fusion = config.get("--flashinfer-allreduce-fusion-backend")
        algo_factor = ALGO[algo]
        if fusion and self.fusion_algo and algo == "tree":
            algo_factor = TREE_FUSED
        us = (latency + per_token * tokens) * algo_factor + per_channel * c + spread / c
        return us * (FUSION[str(fusion)] if fusion else 1.0)

    @staticmethod
    def drafts(config: Config) -> int:
        value = config.get("--speculative-num-draft-tokens")
        return value if isinstance(value, int) else UNSET_DRAFTS

    def verify_ms(self, config: Config) -> float:
        verify = COMPUTE_MS * (1.0 + 0.03 * (self.drafts(config) - 1))
        return verify + self.n_allreduce * self.allreduce_us(config) / 1000.0

    def tok_s(self, config: Config) -> float:
        accept = sum(P_ACCEPT ** i for i in range(self.drafts(config)))
        return accept * 1000.0 / (self.verify_ms(config) + DRAFT_MS + OVERHEAD_MS)


TOYS: dict[str, tuple[ToyServer, str]] = {
    "separable": (ToyServer(), "toy server, no interaction between knobs"),
    "interact": (ToyServer(proto_channels=True, fusion_algo=True),
                 "toy server: best channels depend on the protocol, fusion flips the best "
                 "algorithm"),
    "wrong-order": (ToyServer(proto_drafts=True),
                    "toy server: draft tokens (last stage) matter most and decide the best "
                    "protocol"),
    "plateau": (ToyServer(n_allreduce=20), "toy server with little communication (separable)"),
}
COST_MODEL = ("bench", "bench+tree", "verify-campaign")
MACHINES = ("founding", "needle", "failures")  # benchmarks/machines.py
LEVERS = ("three-levers", "mis-rated")  # benchmarks/landscapes_levers.py
FAILURES = ("conditional-oom", "refused-alone")  # benchmarks/landscapes_failures.py
NAMES = (*COST_MODEL, *TOYS, *MACHINES, *LEVERS, *FAILURES)


def builtin_landscape(name: str) -> Landscape:
    """A landscape of this module by name (COST_MODEL or TOYS; the machines, the lever and
    failure landscapes, which build on this module, and measured tables:
    landscape_table.load_landscape)."""
    if name in COST_MODEL:
        return _cost_model(name)
    if name in TOYS:
        server, about = TOYS[name]
        space = from_mapping({**WIDE_SPACE, "name": name}, "benchmarks/landscapes.py")
        return Landscape(name, space, server.tok_s, about)
    raise ValueError(f"unknown landscape {name!r}; landscapes: {', '.join(NAMES)}, table:PATH")


def best_depends_on(landscape: Landscape) -> dict[str, set[str]]:
    """Per knob, the other knobs whose value changes its best value (empty: separable)."""
    space = landscape.space
    names = list(space.domains)
    sign = 1.0 if landscape.mode == "max" else -1.0
    out: dict[str, set[str]] = {n: set() for n in names}
    for name in names:
        bests: dict[tuple[Any, ...], Value] = {}
        for point in valid_points(space):
            key = tuple(point[n] for n in names if n != name)
            if key in bests:
                continue
            scored = [(sign * v, i) for i, value in enumerate(space.domains[name])
                      if not space.validate(p := {**point, name: value})
                      and (v := landscape.evaluate(p)) is not None]
            if scored:
                bests[key] = space.domains[name][max(scored)[1]]
        for other in names:
            if other == name:
                continue
            index = [n for n in names if n != name].index(other)
            groups: dict[tuple[Any, ...], set[str]] = {}
            for key, best in bests.items():
                rest = key[:index] + key[index + 1:]
                groups.setdefault(rest, set()).add(repr(best))
            if any(len(g) > 1 for g in groups.values()):
                out[name].add(other)
    return out


def fraction_of_optimum(landscape: Landscape, value: float | None) -> float:
    if value is None:
        return math.nan
    return value / landscape.optimum if landscape.mode == "max" else landscape.optimum / value
