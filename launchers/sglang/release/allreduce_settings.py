"""The settings SGLang's allreduce dispatch reads (SGLang 0.5.23 spellings, with its defaults),
from a configuration in primitive knobs (flags and SGLANG_* variables).

Environment variables the configuration leaves unset are read from ``inherited`` (the
environment the server would inherit), as SGLang reads them; flags it leaves unset are off.
Values are parsed as SGLang's env registry parses them (``env``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from launchers.sglang.release.env import parse_bool, parse_int

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

_S = TypeVar("_S", bound="Settings")


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
    def from_primitives(cls: type[_S], primitive: Mapping[str, Any],
                        inherited: Mapping[str, str] | None = None) -> _S:
        """The settings of a configuration in primitive knobs, unset variables read from
        ``inherited``. Raises ValueError for a value SGLang would refuse."""
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
