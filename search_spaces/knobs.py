"""The knob catalogue: every setting servetune can tune, with its domain, rendering and checks.

A knob is either an environment variable read by NCCL (``NCCL_*``) or a server command-line
flag. A configuration is a flat ``{knob name: value}`` dict; the value ``None`` means "leave
it unset" (the library's or server's own default). Facts behind the domains are in
shared/reference/nccl.md and sglang.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

Value = str | int | bool | None

# NCCL_ALGO / NCCL_PROTO tokens, lower-cased (NCCL matches case-insensitively).
NCCL_ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
NCCL_PROTOCOLS = ("ll", "ll128", "simple")
NCCL_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


class KnobKind(str, Enum):
    ENV = "env"
    FLAG = "flag"


class Group(str, Enum):
    NCCL = "nccl"
    MULTICAST = "multicast"
    FUSION = "fusion"
    ALLREDUCE = "allreduce"
    GRAPH = "graph"
    SPECULATIVE = "speculative"


Checker = Callable[[Value], str | None]


@dataclass(frozen=True)
class Knob:
    """One setting. ``check`` returns a reason when a value is outside the domain."""

    name: str
    kind: KnobKind
    group: Group
    help: str
    choices: tuple[Value, ...]  # the default search values (None = unset is added by spaces)
    check: Checker
    warnings: Mapping[str, str] = field(default_factory=dict)  # value (as text) -> why flagged

    @property
    def is_switch(self) -> bool:
        """A boolean flag: off (False) is its unset state."""
        return self.check is _boolean

    @property
    def unset(self) -> Value:
        return False if self.is_switch else None

    def validate(self, value: Value) -> str | None:
        if value is None:
            return None
        return self.check(value)

    def warning(self, value: Value) -> str | None:
        if value is None:
            return None
        key = str(value).lower()
        return next((why for flagged, why in self.warnings.items() if flagged == key), None)

    def render_env(self, value: Value) -> str | None:
        """The env var's text, or None when the variable is left unset."""
        if self.kind is not KnobKind.ENV or value is None:
            return None
        if isinstance(value, bool):
            return "1" if value else "0"
        return str(value)

    def render_argv(self, value: Value) -> list[str]:
        """The flag's argv words; ``[]`` when unset (or a boolean flag that is off)."""
        if self.kind is not KnobKind.FLAG or value is None or value is False:
            return []
        if value is True:
            return [self.name]
        return [self.name, str(value)]


# ---------------------------------------------------------------- domain checks


def _one_of(*allowed: Value) -> Checker:
    def check(value: Value) -> str | None:
        if value in allowed and type(value) in {type(a) for a in allowed}:
            return None
        return f"must be one of {', '.join(repr(a) for a in allowed)}"

    return check


def _boolean(value: Value) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _int_in(low: int, high: int, *, multiple_of: int = 1, power_of_two: bool = False) -> Checker:
    def check(value: Value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not low <= value <= high:
            return f"must be in [{low}, {high}], got {value}"
        if value % multiple_of:
            return f"must be a multiple of {multiple_of}, got {value}"
        if power_of_two and value & (value - 1):
            return f"must be a power of two, got {value}"
        return None

    return check


def _nccl_token_list(tokens: str, known: tuple[str, ...], what: str) -> str | None:
    words = tokens[1:] if tokens.startswith("^") else tokens
    parts = [w.strip().lower() for w in words.split(",")]
    bad = [p for p in parts if p not in known]
    if not parts or bad:
        return f"unknown {what} {', '.join(repr(b) for b in bad) or '(empty)'}; known: {', '.join(known)}"
    return None


def _nccl_selector(known: tuple[str, ...], what: str) -> Checker:
    """NCCL_ALGO / NCCL_PROTO syntax: ``Ring,Tree``, ``^LL128``, or ``allreduce:tree;allgather:ring``."""

    def check(value: Value) -> str | None:
        if not isinstance(value, str) or not value.strip():
            return f"must be a non-empty string, got {value!r}"
        for clause in value.split(";"):
            if ":" in clause:
                collective, tokens = clause.split(":", 1)
                if collective.strip().lower() not in NCCL_COLLECTIVES:
                    return f"unknown collective {collective!r}; known: {', '.join(NCCL_COLLECTIVES)}"
            else:
                tokens = clause
            reason = _nccl_token_list(tokens.strip(), known, what)
            if reason:
                return reason
        return None

    return check


def is_global_selector(value: Value) -> bool:
    """True for an NCCL_ALGO/PROTO value that applies to every collective (no ``coll:`` prefix)."""
    return isinstance(value, str) and ":" not in value


def selector_for(value: Value, collective: str) -> list[str] | None:
    """The tokens an NCCL_ALGO/PROTO value selects for ``collective`` (None: not restricted).

    ``^`` exclusions are returned with their caret, e.g. ``["^ll128"]``.
    """
    if not isinstance(value, str):
        return None
    for clause in value.split(";"):
        if ":" in clause:
            coll, tokens = clause.split(":", 1)
            if coll.strip().lower() != collective:
                continue
        else:
            tokens = clause
        tokens = tokens.strip().lower()
        if tokens.startswith("^"):
            return ["^" + t.strip() for t in tokens[1:].split(",")]
        return [t.strip() for t in tokens.split(",")]
    return None


_FLAG_NAME = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
_TREE_GLOBAL = (
    "global NCCL_ALGO applies to every collective; since NCCL 2.24 a global Tree makes "
    "AllGather/ReduceScatter fail ('No algorithm/protocol available'), which kills CUDA "
    "graph capture. Prefer allreduce:tree"
)
_LL128_FORCED = "LL128 forced off NVLink skips NCCL's hardware check and can corrupt results"


# ---------------------------------------------------------------- the catalogue


def _env(name: str, group: Group, help: str, choices: tuple[Value, ...], check: Checker,
         warnings: Mapping[str, str] | None = None) -> Knob:
    return Knob(name, KnobKind.ENV, group, help, choices, check, dict(warnings or {}))


def _flag(name: str, group: Group, help: str, choices: tuple[Value, ...], check: Checker,
          warnings: Mapping[str, str] | None = None) -> Knob:
    assert _FLAG_NAME.match(name), name
    return Knob(name, KnobKind.FLAG, group, help, choices, check, dict(warnings or {}))


CATALOGUE: dict[str, Knob] = {
    k.name: k
    for k in [
        _env("NCCL_ALGO", Group.NCCL,
             "Algorithm. Per collective by default (allreduce:tree); a global value is flagged.",
             ("allreduce:ring", "allreduce:tree"),
             _nccl_selector(NCCL_ALGORITHMS, "algorithm"),
             {"tree": _TREE_GLOBAL, "ring": "global NCCL_ALGO applies to every collective",
              "nvls": "global NCCL_ALGO applies to every collective"}),
        _env("NCCL_PROTO", Group.NCCL, "Protocol: LL, LL128, Simple; per collective allowed.",
             ("LL", "LL128", "Simple"),
             _nccl_selector(NCCL_PROTOCOLS, "protocol"),
             {"ll128": _LL128_FORCED, "allreduce:ll128": _LL128_FORCED}),
        _env("NCCL_MIN_NCHANNELS", Group.NCCL, "Minimum channels (CTAs) per collective.",
             (1, 2, 4, 8, 16), _int_in(1, 64)),
        _env("NCCL_MAX_NCHANNELS", Group.NCCL, "Maximum channels (CTAs) per collective.",
             (1, 2, 4, 8, 16, 32), _int_in(1, 64)),
        _env("NCCL_BUFFSIZE", Group.NCCL,
             "Simple-protocol buffer per channel, bytes (power of two, 64 KiB..256 MiB).",
             (262144, 1048576, 2097152, 4194304, 8388608),
             _int_in(65536, 268435456, power_of_two=True)),
        _env("NCCL_NTHREADS", Group.NCCL, "Threads per CTA: a multiple of 32 in [64, 512].",
             (64, 128, 256, 512), _int_in(64, 512, multiple_of=32)),
        _env("NCCL_P2P_LEVEL", Group.NCCL,
             "Deepest topology level where GPUs use P2P (LOC disables P2P).",
             ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"),
             _one_of("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")),
        _env("NCCL_GRAPH_MIXING_SUPPORT", Group.NCCL,
             "0 drops the extra events around NCCL kernels in CUDA graphs.", (0, 1), _one_of(0, 1)),
        _env("NCCL_CUMEM_ENABLE", Group.NCCL,
             "cuMem allocations (needed by NVLS and symmetric kernels). SGLang sets it when unset.",
             (0, 1), _one_of(0, 1)),
        _env("NCCL_NVLS_ENABLE", Group.NCCL,
             "NVLink SHARP / multicast. Pin to 0 where multicast is forbidden.",
             (0, 1), _one_of(0, 1, 2)),
        _env("TORCH_SYMM_MEM_DISABLE_MULTICAST", Group.MULTICAST,
             "1 keeps PyTorch symmetric memory off NVLink multicast.", (0, 1), _one_of(0, 1)),
        _env("NVSHMEM_DISABLE_NVLS", Group.MULTICAST,
             "1 keeps NVSHMEM off NVLink multicast.", (0, 1), _one_of(0, 1)),
        _flag("--enable-nccl-nvls", Group.MULTICAST, "NCCL NVLS (multicast) allreduce in SGLang.",
              (False, True), _boolean),
        _flag("--flashinfer-allreduce-fusion-backend", Group.FUSION,
              "FlashInfer allreduce+RMSNorm fusion backend.",
              ("auto", "trtllm"), _one_of("auto", "trtllm", "mnnvl", "cutedsl")),
        _flag("--enforce-disable-flashinfer-allreduce-fusion", Group.FUSION,
              "Turn off the fusion SGLang auto-enables on SM90/SM100 with tp>1.",
              (False, True), _boolean),
        _flag("--disable-custom-all-reduce", Group.ALLREDUCE,
              "Use NCCL instead of SGLang's custom allreduce kernel.", (False, True), _boolean),
        _flag("--enable-torch-symm-mem", Group.ALLREDUCE, "PyTorch symmetric-memory allreduce.",
              (False, True), _boolean),
        _flag("--enable-symm-mem", Group.ALLREDUCE, "NCCL symmetric-memory kernels.",
              (False, True), _boolean),
        _flag("--enable-mscclpp", Group.ALLREDUCE, "MSCCL++ allreduce for small messages.",
              (False, True), _boolean),
        _flag("--enable-torch-compile", Group.GRAPH, "torch.compile the model.",
              (False, True), _boolean),
        _flag("--cuda-graph-max-bs-decode", Group.GRAPH, "Largest decode batch captured.",
              (8, 16, 32, 64), _int_in(1, 1024)),
        _flag("--speculative-num-steps", Group.SPECULATIVE, "Draft steps per cycle.",
              (1, 2, 3, 4, 5), _int_in(1, 16)),
        _flag("--speculative-eagle-topk", Group.SPECULATIVE, "Draft branches per step.",
              (1, 2, 4), _int_in(1, 16)),
        _flag("--speculative-num-draft-tokens", Group.SPECULATIVE,
              "Tokens verified per cycle (verify batch = batch x this).",
              (2, 3, 4, 6, 8), _int_in(1, 64)),
    ]
}

SPECULATIVE_KNOBS = ("--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens")


class UnknownKnob(KeyError):
    def __str__(self) -> str:
        return f"unknown knob {self.args[0]!r}; valid knobs: {', '.join(CATALOGUE)}"


def canonical_name(name: str) -> str:
    """Knob names as users may write them: ``NCCL_ALGO``, ``--enable-symm-mem``, ``enable-symm-mem``."""
    if name in CATALOGUE:
        return name
    if f"--{name}" in CATALOGUE:
        return f"--{name}"
    upper = name.upper()
    if upper in CATALOGUE:
        return upper
    raise UnknownKnob(name)


def get(name: str) -> Knob:
    return CATALOGUE[canonical_name(name)]


# ---------------------------------------------------------------- cross-knob constraints

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
    if all(isinstance(v, int) for v in (steps, topk, drafts)):
        assert isinstance(steps, int) and isinstance(topk, int) and isinstance(drafts, int)
        if steps * topk + 1 < drafts:
            return (f"speculative steps*topk+1 = {steps}*{topk}+1 < num-draft-tokens={drafts}")
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


CONSTRAINTS: tuple[Callable[[Config], str | None], ...] = (
    _channels, _speculative, _nvls, _symmetric_memory, _nvls_protocol,
)


def check_config(config: Config) -> list[str]:
    """Every reason the configuration is invalid (empty list: valid)."""
    reasons: list[str] = []
    for name, value in config.items():
        knob = CATALOGUE.get(name)
        if knob is None:
            reasons.append(str(UnknownKnob(name)))
            continue
        reason = knob.validate(value)
        if reason:
            reasons.append(f"{name}: {reason}")
    if reasons:
        return reasons
    return [r for constraint in CONSTRAINTS if (r := constraint(config))]


def config_warnings(config: Config) -> list[str]:
    """Values that are valid but flagged (a global NCCL_ALGO, forced LL128)."""
    out = []
    for name, value in config.items():
        knob = CATALOGUE.get(name)
        why = knob.warning(value) if knob else None
        if why:
            out.append(f"{name}={value}: {why}")
    return out
