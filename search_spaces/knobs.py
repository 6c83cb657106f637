"""The knob catalogue's public face: lookups, configuration checks and composite expansion.

A configuration is a flat ``{knob name: value}`` dict; ``None`` means "leave it unset". The
knobs themselves live in ``catalogue.py`` (primitives: env variables and server flags) and
``composite.py`` (choices that stand for several primitives, e.g. ``allreduce-backend``);
a space may add open knobs of its own (``open_knobs.py``), passed here as ``extra``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from search_spaces.catalogue import EFFECTS, MEDIUM, PRIMITIVES, SMALL, SPECULATIVE_KNOBS
from search_spaces.composite import (
    ALLREDUCE_BACKEND,
    COMPOSITES,
    DUMMY,
    WEIGHTS,
    conflicts,
    expand_config,
    primitive_names,
    weights_of,
    without_weights,
)
from search_spaces.constraints import Config, violations
from search_spaces.domains import (
    NCCL_ALGORITHMS,
    NCCL_COLLECTIVES,
    NCCL_PROTOCOLS,
    Value,
    is_global_selector,
    selector_for,
)
from search_spaces.knob import Group, Knob, KnobKind, Source

__all__ = [
    "ALLREDUCE_BACKEND", "CATALOGUE", "COMPOSITES", "DUMMY", "NCCL_ALGORITHMS",
    "NCCL_COLLECTIVES", "NCCL_PROTOCOLS", "SPECULATIVE_KNOBS", "WEIGHTS", "Config", "Group",
    "Knob", "KnobKind", "Source", "UnknownKnob", "Value", "canonical_name", "check_config",
    "config_warnings", "effect", "expand_config", "get", "is_global_selector", "primitive_names",
    "renderer", "selector_for", "weights_of", "without_weights",
]

CATALOGUE: dict[str, Knob] = {**PRIMITIVES, **{n: c.knob for n, c in COMPOSITES.items()}}


class UnknownKnob(KeyError):
    def __str__(self) -> str:
        name = str(self.args[0])
        near = difflib.get_close_matches(name, list(CATALOGUE), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        return (f"unknown knob {name!r}; {hint}valid knobs: {', '.join(CATALOGUE)} (a space "
                "may declare another as NAME: {env: TYPE, values: [...]} or {flag: ...})")


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


def check_config(config: Config, extra: Mapping[str, Knob] | None = None) -> list[str]:
    """Every reason the configuration is invalid (empty list: valid). ``extra``: open knobs
    a space declares besides the catalogue."""
    known = {**CATALOGUE, **(extra or {})}
    reasons: list[str] = []
    for name, value in config.items():
        knob = known.get(name)
        if knob is None:
            reasons.append(str(UnknownKnob(name)))
            continue
        reason = knob.validate(value)
        if reason:
            reasons.append(f"{name}: {reason}")
    if reasons:
        return reasons
    return conflicts(config) or violations(expand_config(config))


def config_warnings(config: Config, extra: Mapping[str, Knob] | None = None) -> list[str]:
    """Values that are valid but flagged (a global NCCL_ALGO, forced LL128)."""
    known = {**CATALOGUE, **(extra or {})}
    out = []
    for name, value in expand_config(config).items():
        knob = known.get(name)
        why = knob.warning(value) if knob else None
        if why:
            out.append(f"{name}={value}: {why}")
    return out


def renderer(name: str) -> Knob:
    """The knob that renders ``name``: the catalogue's, or for an open knob (one a space
    declares) a plain one read from the name: ``--x`` is a flag, anything else an env
    variable. An open knob's rendering needs nothing but its name and value."""
    knob = CATALOGUE.get(name)
    if knob is not None:
        return knob
    kind = KnobKind.FLAG if name.startswith("--") else KnobKind.ENV
    return Knob(name, kind, Group.OPEN, "declared by a space", (), lambda value: None,
                source=Source.SGLANG_FLAG if kind is KnobKind.FLAG else Source.ENV, declared=True)


def effect(name: str, config: Mapping[str, Value] | None = None) -> float:
    """How much the knob can change a verify pass, as a factor (catalogue.EFFECTS: 2.0, 1.1
    or 1.01); a knob the catalogue does not rate (an open knob) counts as a middle one. With
    ``config``: NCCL's own knobs act only on what NCCL carries, so where the config sends
    the verify pass's allreduces elsewhere (PCIe-IPC, torch symmetric memory, MSCCL++, a
    FlashInfer fusion backend) they count as small."""
    rated = EFFECTS.get(name, MEDIUM)
    knob = CATALOGUE.get(name)
    if config is not None and knob is not None and knob.group is Group.NCCL \
            and not nccl_carries_allreduce(config):
        return min(rated, SMALL)
    return rated


def nccl_carries_allreduce(config: Mapping[str, Value]) -> bool:
    """False where the config turns on a backend SGLang tries before NCCL for the verify
    pass's allreduces (composite.py has SGLang's order)."""
    flags = expand_config(config)
    fused = flags.get("--flashinfer-allreduce-fusion-backend") is not None \
        and not flags.get("--enforce-disable-flashinfer-allreduce-fusion")
    return not (fused or flags.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == 1
                or flags.get("--enable-torch-symm-mem") is True
                or flags.get("--enable-mscclpp") is True)


# Mechanisms: knobs that act on the same thing pay off jointly more often than others (NCCL's
# algorithm, protocol and channel count are one choice in NCCL's own tuning; the backend and
# fusion decide which allreduce runs, so whether NCCL's knobs act at all).
_MECHANISM = {Group.NCCL: "nccl", Group.MULTICAST: "nccl", Group.ALLREDUCE: "allreduce",
              Group.FUSION: "allreduce", Group.SPECULATIVE: "speculative", Group.GRAPH: "graph"}
_RELATED = {frozenset({"nccl", "allreduce"})}


def joint(a: str, b: str) -> bool:
    """Whether two knobs act on one mechanism (or on two that decide each other)."""
    ka, kb = CATALOGUE.get(a), CATALOGUE.get(b)
    if ka is None or kb is None:
        return False
    ma, mb = _MECHANISM.get(ka.group), _MECHANISM.get(kb.group)
    return ma is not None and mb is not None and (ma == mb or frozenset({ma, mb}) in _RELATED)
