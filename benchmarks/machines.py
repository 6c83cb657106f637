"""Landscapes modelled on machines, with the ways they fail (benchmarks/landscapes.py has the
stand-in's cost model and the toy servers). Made up from the facts cited, not measured: test
data for the searchers, each with a structure the others lack.

- ``founding``: the founding machine, 8 GPUs on PCIe at TP 8 (shared/reference/peers.md: a
  30 ms verify pass, 25 ms of it in NCCL allreduce). SGLang's default and three backends run
  NCCL (the custom allreduce needs 2 ranks or NVLink); one, PCIe-IPC, makes the pass 3.7x
  faster; three crash, each its own way; NCCL's knobs matter only on NCCL's path.
- ``needle``: a flat landscape (every knob within 1%) with one narrow good combination: two
  knobs jointly +12%, neither alone.
- ``failures``: the ``wrong-order`` toy (benchmarks/landscapes.py) measured as verify ms
  (min) with failures of every shape: a fusion backend the server refuses (``invalid_config``,
  everywhere), two culprits of one kind (one channel count and one draft count fail CUDA graph
  capture wherever they are) and a pair that fails only together (Tree with LL128).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.landscapes import STAGES, TOYS, WIDE_SPACE, Config, Landscape, ToyServer, nccl_token
from search_spaces.knobs import Value
from search_spaces.space import from_mapping

SOURCE = "benchmarks/machines.py"

# ---------------------------------------------------------------- the founding machine

FOUNDING_SPACE: dict[str, Any] = {
    "name": "founding",
    "knobs": {
        "allreduce-backend": None,  # every backend the catalogue has
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"],
        "NCCL_PROTO": ["LL", "LL128", "Simple"],
        "NCCL_MAX_NCHANNELS": [2, 4, 8, 16],
        "--speculative-num-draft-tokens": [2, 3, 6],
    },
    # steps pinned (draft tokens alone are a partial shape SGLang asserts on)
    "pins": {"NCCL_NVLS_ENABLE": 0, "--speculative-num-steps": 5},
    "stages": [
        {"name": "allreduce", "knobs": ["allreduce-backend", "NCCL_ALGO", "NCCL_PROTO"]},
        {"name": "channels", "knobs": ["NCCL_MAX_NCHANNELS"]},
        {"name": "speculative", "knobs": ["--speculative-num-draft-tokens"]},
    ],
}
# backend -> the failure it meets on this machine (each its own way)
FOUNDING_CRASHES = {
    "torch-symm-mem": "graph_capture",  # symmetric memory without P2P: capture fails
    "nccl-symm-mem": "nccl_invalid_usage",  # NCCL's symmetric kernels need NVLink
    "flashinfer-fusion": "crashed",  # FlashInfer fusion with TP + EAGLE (sglang#29485)
}
NCCL_PATH = {None, "nccl", "custom-v1", "custom-v2", "one-stage", "mscclpp"}
BACKEND_US = {"one-stage": 1.25, "mscclpp": 0.85}  # x NCCL's time on this machine
PCIE_IPC_US = 22.8  # per allreduce: the pass 3.7x faster than NCCL's
NCCL_US = 205.0  # per allreduce at SGLang's default: 25 ms over 122 allreduces
FOUNDING_ALGO = {"ring": 1.0, "tree": 0.75}
FOUNDING_PROTO = {"ll": 0.6, "ll128": 1.0, "simple": 1.12}  # LL128 is off PCIe
FOUNDING_CHANNELS = {None: 1.0, 2: 1.06, 4: 0.96, 8: 1.0, 16: 1.07}
N_ALLREDUCE, COMPUTE_MS, P_ACCEPT = 122, 5.0, 0.75


def founding_verify_ms(config: Config) -> float | None:
    """The verify pass at 4 tokens x the draft count; None where the backend crashes."""
    backend = config.get("allreduce-backend")
    if backend in FOUNDING_CRASHES:
        return None
    tokens = ToyServer.drafts(config)  # unset: 4, as the toys price it
    size = 1.0 + 0.05 * (tokens - 4)  # the message grows with the verify batch
    if backend == "pcie-ipc":
        allreduce = PCIE_IPC_US * size
    else:
        algo = FOUNDING_ALGO.get(nccl_token(config.get("NCCL_ALGO"), "allreduce", "ring"), 1.0)
        proto = FOUNDING_PROTO.get(nccl_token(config.get("NCCL_PROTO"), "allreduce", ""), 1.0)
        channels = FOUNDING_CHANNELS.get(config.get("NCCL_MAX_NCHANNELS"), 1.0)  # type: ignore[arg-type]
        allreduce = NCCL_US * size * algo * proto * channels * BACKEND_US.get(str(backend), 1.0)
    return COMPUTE_MS * (1.0 + 0.03 * (tokens - 1)) + N_ALLREDUCE * allreduce / 1000.0


def founding_tok_s(config: Config) -> float | None:
    verify = founding_verify_ms(config)
    if verify is None:
        return None
    tokens = ToyServer.drafts(config)
    accept = sum(P_ACCEPT ** i for i in range(tokens))
    return accept * 1000.0 / (verify + 0.6 * (tokens - 1) + 0.5)


def founding_failure(config: Config) -> str:
    return FOUNDING_CRASHES.get(str(config.get("allreduce-backend")), "crashed")


# ---------------------------------------------------------------- a needle in a flat landscape


def _jitter(name: str, value: Value, size: float) -> float:
    """A small fixed effect per setting, in [-size, +size] (a hash, not a random draw)."""
    digest = hashlib.sha256(f"{name}={value}".encode()).digest()
    return 1.0 + size * (2.0 * digest[0] / 255.0 - 1.0)


@dataclass(frozen=True)
class Needle:
    """Flat within ``jitter`` per knob, times ``gain`` where both settings of ``pair`` hold."""

    pair: tuple[tuple[str, Value], tuple[str, Value]]
    gain: float = 1.12
    jitter: float = 0.005
    base: float = 300.0

    def tok_s(self, config: Config) -> float:
        value = self.base
        for name, setting in sorted(config.items()):
            value *= _jitter(name, setting, self.jitter)
        if all(config.get(n) == v for n, v in self.pair):
            value *= self.gain
        return value


NEEDLE = Needle((("NCCL_PROTO", "LL128"), ("--flashinfer-allreduce-fusion-backend", "auto")))

# ---------------------------------------------------------------- failures of every shape

FAILURES_SPACE: dict[str, Any] = {
    **WIDE_SPACE, "name": "failures",
    "knobs": {**WIDE_SPACE["knobs"],
              "NCCL_MAX_NCHANNELS": [1, 4, 8, 16],
              "--flashinfer-allreduce-fusion-backend": ["auto", "trtllm", "mnnvl"],
              "--speculative-num-draft-tokens": [2, 3, 6, 8]},
}
FAILURES: tuple[tuple[Callable[[Config], bool], str], ...] = (
    (lambda c: c.get("--flashinfer-allreduce-fusion-backend") == "mnnvl", "invalid_config"),
    (lambda c: c.get("NCCL_MAX_NCHANNELS") == 1, "graph_capture"),
    (lambda c: c.get("--speculative-num-draft-tokens") == 2, "graph_capture"),
    (lambda c: c.get("NCCL_ALGO") == "allreduce:tree" and c.get("NCCL_PROTO") == "LL128",
     "nccl_invalid_usage"),
)


def failures_kind(config: Config) -> str | None:
    return next((kind for fails, kind in FAILURES if fails(config)), None)


def failures_verify_ms(config: Config) -> float | None:
    if failures_kind(config) is not None:
        return None
    return TOYS["wrong-order"][0].verify_ms(config)


# ---------------------------------------------------------------- by name

def machine_landscape(name: str) -> Landscape:
    if name == "founding":
        return Landscape(name, from_mapping(FOUNDING_SPACE, SOURCE), founding_tok_s,
                         "8 PCIe GPUs at TP 8: PCIe-IPC makes the pass 3.7x faster, three "
                         "backends crash", failure=founding_failure)
    if name == "needle":
        return Landscape(name, from_mapping({**WIDE_SPACE, "name": name}, SOURCE), NEEDLE.tok_s,
                         "flat within 1%, two settings jointly +12%")
    if name == "failures":
        def kind(config: Mapping[str, Value]) -> str:
            return failures_kind(config) or "crashed"

        return Landscape(name, from_mapping({**FAILURES_SPACE, "stages": STAGES}, SOURCE),
                         failures_verify_ms, "wrong-order as verify ms, with an always-invalid "
                         "value, two culprits of one kind and a failing pair",
                         metric="verify_ms", mode="min", failure=kind)
    raise ValueError(f"unknown machine landscape {name!r}")
