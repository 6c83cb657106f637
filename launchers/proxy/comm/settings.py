"""The settings SGLang's allreduce dispatch reads, taken from a configuration.

A configuration names knobs; ``search_spaces.knobs.expand_config`` (where this checkout has
it) turns a composite knob such as ``allreduce-backend`` into the primitive flags and SGLANG_*
variables it stands for, and passes primitives through. Until that function lands the
configuration is read as it is (primitives only). Environment variables the configuration
leaves unset are read from ``inherited`` (the environment the server would inherit), as SGLang
reads them; flags the configuration leaves unset are off.

Values are parsed the way SGLang's env registry parses them (``sglang.srt.environ``:
``EnvBool`` takes true/1/yes/y and false/0/no/n in any case, ``EnvInt`` an integer); a bad
value raises ValueError naming the variable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

# The flags and variables the dispatch reads (SGLang 0.5.23 spellings), with SGLang's defaults.
FLAGS = ("--disable-custom-all-reduce", "--enable-torch-symm-mem", "--enable-symm-mem",
         "--enable-mscclpp", "--flashinfer-allreduce-fusion-backend",
         "--enforce-disable-flashinfer-allreduce-fusion")
ENV_BOOL = {"SGLANG_USE_1STAGE_ALLREDUCE": None,  # None: not set (is_set() matters)
            "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": True,
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": False}
ENV_INT = {"SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB": 16 * 1024,
           "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB": None,
           "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB": None,
           "SGLANG_PCIE_IPC_MAX_NUMEL": 0}
MULTICAST_OFF_ENV = "TORCH_SYMM_MEM_DISABLE_MULTICAST"  # PyTorch: 1 = no NVLink multicast
MODELLED_ENV = (*ENV_BOOL, *ENV_INT, MULTICAST_OFF_ENV)

_TRUE, _FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")


def _expander() -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """search_spaces.knobs.expand_config where this checkout has it."""
    try:
        knobs = importlib.import_module("search_spaces.knobs")
    except ImportError:
        return None
    found = getattr(knobs, "expand_config", None)
    return cast("Callable[[Mapping[str, Any]], dict[str, Any]]", found) if callable(found) else None


def expand(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration in primitive knobs: expand_config's answer, or the config itself."""
    expander = _expander()
    return dict(config) if expander is None else dict(expander(config))


def parse_bool(name: str, value: object) -> bool:
    """SGLang's EnvBool parsing of one value (a bool or int passes as its text)."""
    text = str(int(value) if isinstance(value, bool) else value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean SGLang accepts (true/1/yes/y, "
                     "false/0/no/n)")


def parse_int(name: str, value: object) -> int:
    """SGLang's EnvInt parsing of one value."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not an integer")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _flag_on(value: object) -> bool:
    return value is not None and value is not False and value != 0


@dataclass(frozen=True)
class Settings:
    """What SGLang's allreduce dispatch reads from the server's flags and environment."""

    disable_custom_all_reduce: bool = False
    enable_torch_symm_mem: bool = False
    enable_symm_mem: bool = False  # NCCL symmetric memory through pynccl
    enable_mscclpp: bool = False
    fusion_backend: str | None = None  # --flashinfer-allreduce-fusion-backend; None: unset
    enforce_disable_fusion: bool = False
    one_stage: bool | None = None  # SGLANG_USE_1STAGE_ALLREDUCE; None: not set
    custom_ar_v2: bool = True
    v2_max_size_kb: int = 16 * 1024
    v2_force_pull_kb: int | None = None
    v2_force_push_kb: int | None = None
    pcie_ipc: bool = False
    pcie_ipc_max_numel: int = 0
    multicast_off: bool = False  # TORCH_SYMM_MEM_DISABLE_MULTICAST=1

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    inherited: Mapping[str, str] | None = None) -> Settings:
        """The settings of a configuration (composites expanded), unset variables read from
        ``inherited``. Raises ValueError for a value SGLang would refuse."""
        primitive = expand(config)
        env = dict(inherited or {})

        def value(name: str) -> object:
            got = primitive.get(name)
            return env.get(name) if got is None and name not in primitive else got

        def env_bool(name: str) -> bool | None:
            raw = value(name)
            return ENV_BOOL[name] if raw is None else parse_bool(name, raw)

        def env_int(name: str) -> int | None:
            raw = value(name)
            return ENV_INT[name] if raw is None else parse_int(name, raw)

        backend = primitive.get("--flashinfer-allreduce-fusion-backend")
        multicast = value(MULTICAST_OFF_ENV)
        return cls(
            disable_custom_all_reduce=_flag_on(primitive.get("--disable-custom-all-reduce")),
            enable_torch_symm_mem=_flag_on(primitive.get("--enable-torch-symm-mem")),
            enable_symm_mem=_flag_on(primitive.get("--enable-symm-mem")),
            enable_mscclpp=_flag_on(primitive.get("--enable-mscclpp")),
            fusion_backend=str(backend) if backend not in (None, False) else None,
            enforce_disable_fusion=_flag_on(
                primitive.get("--enforce-disable-flashinfer-allreduce-fusion")),
            one_stage=env_bool("SGLANG_USE_1STAGE_ALLREDUCE"),
            custom_ar_v2=bool(env_bool("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2")),
            v2_max_size_kb=int(env_int("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB") or 0),
            v2_force_pull_kb=env_int("SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PULL_SIZE_KB"),
            v2_force_push_kb=env_int("SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB"),
            pcie_ipc=bool(env_bool("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")),
            pcie_ipc_max_numel=int(env_int("SGLANG_PCIE_IPC_MAX_NUMEL") or 0),
            multicast_off=multicast is not None and parse_bool(MULTICAST_OFF_ENV, multicast),
        )
