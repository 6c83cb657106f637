"""Composite knobs: one choice that stands for several primitive flags and env variables.

``allreduce-backend`` picks which allreduce serves a TP group. SGLang has no such switch: it
tries its backends in a fixed order, each under its own size rule
(``GroupCoordinator.all_reduce`` and ``_resolve_outplace_all_reduce_method`` in
sglang/srt/distributed/parallel_state.py, 0.5.23): MSCCL++, NCCL symmetric memory (unless
custom allreduce takes the tensor), FlashInfer (when a fusion workspace exists), then custom
allreduce, PCIe-IPC, quick allreduce (ROCm), MSCCL++, torch symmetric memory, and NCCL in
place (the order as servetune reads it, each rule cited: ``launchers/sglang/release/allreduce``;
the switches it reads: ``allreduce_settings`` there). So each choice turns its backend on and
every backend that would come before it off; NCCL stays the fallback for what the chosen
backend declines (sizes, dtypes).

``weights`` says which weights a trial's server loads: unset, the checkpoint's; ``dummy``,
random ones for the target and the draft model alike (SGLang's ``--load-format dummy``: no
checkpoint read). It is how a trial starts, not a setting servetune chooses: the weight policy
(``tuner/weights.py``) sets it per stage, and it is taken off every configuration that leaves
the search (``without_weights``).

``expand_config(config)`` replaces composites by their primitives. Primitives the config
sets itself pass through unchanged; ``conflicts(config)`` names a primitive that contradicts
the composite's choice (validation rejects such a config).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from search_spaces.catalogue import PRIMITIVES
from search_spaces.domains import Value, one_of
from search_spaces.knob import Group, Knob, KnobKind, Source

ALLREDUCE_BACKEND = "allreduce-backend"
WEIGHTS = "weights"
DUMMY = "dummy"


@dataclass(frozen=True)
class Composite:
    knob: Knob
    expansions: Mapping[str, Mapping[str, Value]]  # choice -> primitive name -> value
    choice_help: Mapping[str, str]


# Every backend switch, at the value that keeps it out of the way (its unset value, or off).
_ALL_OFF: dict[str, Value] = {
    "--disable-custom-all-reduce": False,
    "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": None,
    "SGLANG_USE_1STAGE_ALLREDUCE": None,
    "--enable-torch-symm-mem": False,
    "--enable-symm-mem": False,
    "--enable-mscclpp": False,
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": None,
    "--flashinfer-allreduce-fusion-backend": None,
    "--enforce-disable-flashinfer-allreduce-fusion": False,
}
_NO_CUSTOM = {"--disable-custom-all-reduce": True}
_NO_FUSION = {"--enforce-disable-flashinfer-allreduce-fusion": True}

_BACKENDS: dict[str, tuple[dict[str, Value], str]] = {
    "nccl": ({**_NO_CUSTOM, **_NO_FUSION}, "NCCL for every allreduce"),
    "custom-v1": ({"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 0, **_NO_FUSION},
                  "SGLang's legacy custom allreduce kernel (2 ranks or full NVLink)"),
    "custom-v2": ({"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": 1, **_NO_FUSION},
                  "SGLang's JIT custom allreduce, v2 (2 ranks or full NVLink)"),
    "one-stage": ({"SGLANG_USE_1STAGE_ALLREDUCE": 1, **_NO_FUSION},
                  "the one-stage custom allreduce (ROCm); on CUDA: deterministic collectives"),
    "torch-symm-mem": ({"--enable-torch-symm-mem": True, **_NO_CUSTOM, **_NO_FUSION},
                       "PyTorch symmetric-memory allreduce"),
    "nccl-symm-mem": ({"--enable-symm-mem": True, **_NO_CUSTOM, **_NO_FUSION},
                      "NCCL's symmetric-memory kernels"),
    "mscclpp": ({"--enable-mscclpp": True, **_NO_CUSTOM, **_NO_FUSION},
                "MSCCL++ for the sizes it is tuned for"),
    "pcie-ipc": ({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1, **_NO_CUSTOM, **_NO_FUSION},
                 "FlashInfer's PCIe-IPC kernels (PCIe hosts; 2, 4 or 8 GPUs; bf16)"),
    "flashinfer-fusion": ({"--flashinfer-allreduce-fusion-backend": "auto"},
                          "FlashInfer allreduce+RMSNorm fusion; other allreduces as SGLang picks"),
}

_ALLREDUCE = Composite(
    knob=Knob(ALLREDUCE_BACKEND, KnobKind.COMPOSITE, Group.ALLREDUCE,
              "Which allreduce serves the TP group: one backend on, those SGLang tries first off.",
              tuple(_BACKENDS), one_of(*_BACKENDS), source=Source.SERVETUNE,
              default="unset: SGLang's own order (custom allreduce where the GPUs allow it, "
                      "else NCCL)"),
    expansions={choice: {**_ALL_OFF, **settings} for choice, (settings, _) in _BACKENDS.items()},
    choice_help={choice: why for choice, (_, why) in _BACKENDS.items()},
)

_WEIGHTS = Composite(
    knob=Knob(WEIGHTS, KnobKind.COMPOSITE, Group.SETUP,
              "Which weights the servers load (set per stage by --weights, not searched).",
              (DUMMY,), one_of(DUMMY), source=Source.SERVETUNE,
              default="unset: the checkpoint's"),
    expansions={DUMMY: {"--load-format": DUMMY, "--speculative-draft-load-format": DUMMY}},
    choice_help={DUMMY: "random weights for the target and the draft model, no checkpoint "
                        "read: for timings that do not depend on weight values"},
)

COMPOSITES: dict[str, Composite] = {c.knob.name: c for c in (_ALLREDUCE, _WEIGHTS)}
assert all(p in PRIMITIVES for c in COMPOSITES.values() for e in c.expansions.values() for p in e)


def weights_of(config: Mapping[str, Value]) -> str:
    """``dummy`` when the config has its server load random weights, else ``real``."""
    return DUMMY if config.get(WEIGHTS) == DUMMY else "real"


def without_weights(config: Mapping[str, Value]) -> dict[str, Value]:
    """The config's settings: how its server loaded weights taken off."""
    return {name: value for name, value in config.items() if name != WEIGHTS}


def _is_unset(name: str, value: Value) -> bool:
    return value is None or value == PRIMITIVES[name].unset


def expansion(name: str, choice: Value) -> dict[str, Value]:
    """The primitives one composite choice stands for ({} when unset or not a choice)."""
    composite = COMPOSITES[name]
    if not isinstance(choice, str):
        return {}
    return dict(composite.expansions.get(choice, {}))


def expand_config(config: Mapping[str, Value]) -> dict[str, Value]:
    """``config`` with every composite replaced by its primitives.

    Primitives pass through unchanged: a composite fills in only the primitives the config
    leaves unset (absent, None, or a switch's False). A composite left unset adds nothing.
    """
    out = {name: value for name, value in config.items() if name not in COMPOSITES}
    for name in COMPOSITES:
        for primitive, value in expansion(name, config.get(name)).items():
            if _is_unset(primitive, out.get(primitive)):
                out[primitive] = value
    return out


def primitive_names(names: Iterable[str]) -> set[str]:
    """``names`` with each composite replaced by every primitive it may set: what a space with
    these knobs renders (e.g. to refuse a ``--server-arg`` that repeats one of them)."""
    out: set[str] = set()
    for name in names:
        composite = COMPOSITES.get(name)
        if composite is None:
            out.add(name)
        else:
            out.update(p for expansion in composite.expansions.values() for p in expansion)
    return out


def _shown(value: Value) -> str:
    return "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def conflicts(config: Mapping[str, Value]) -> list[str]:
    """Primitives the config sets that contradict a composite choice it also makes."""
    reasons = []
    for name in COMPOSITES:
        choice = config.get(name)
        for primitive, wanted in expansion(name, choice).items():
            given = config.get(primitive)
            if _is_unset(primitive, given):
                continue
            if given != wanted or type(given) is not type(wanted):
                reasons.append(f"{name}={choice} needs {primitive}={_shown(wanted)}, "
                               f"but the config sets {primitive}={_shown(given)}")
    return reasons
