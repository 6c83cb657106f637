"""Which mode runs the proxy's collectives, decided in the plan (no torch, no SGLang import here).

  emulated  the proxy's own paths (``collectives``): torch.distributed and torch symmetric memory
            standing in for SGLang's kernels, chosen by SGLang 0.5.23's rules re-implemented in
            ``launchers/sglang/release/allreduce`` (read by ``dispatch``); runs anywhere torch
            does (CI, a laptop, CPU with gloo).
  native    the installed SGLang's own distributed layer (``native_group``): the ranks build
            SGLang's tensor-parallel ``GroupCoordinator`` and every collective of the pass goes
            through its ``all_reduce`` / ``all_gather_into_tensor``, so the dispatch, the kernels
            (custom allreduce, PCIe-IPC, MSCCL++, torch symm-mem, pynccl) and the thresholds are
            that release's; each rank records which communicator served.
  auto      native where SGLang's distributed layer and its kernels import, else emulated; the
            reason is recorded either way.

"Imports" means more than ``import sglang``: a probe (``native_probe``, in a subprocess so that
the planning process never imports SGLang or touches a GPU) builds SGLang's tensor-parallel group
over one gloo rank, which runs every import the group's constructor makes, and imports SGLang's
kernels (``sgl_kernel``). The answer is kept per process and in the experiment folder
(``CACHE_FILE``), keyed by the interpreter and the installed versions.

In native mode the paths SGLang runs itself leave the "not modelled" list (PCIe-IPC, MSCCL++);
those the proxy still cannot run as the server does stay (``NATIVE_NOT_MODELLED``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launchers.proxy.comm import dispatch
from launchers.proxy.comm.settings import MULTICAST_OFF_ENV, Settings

AUTO, NATIVE, EMULATED = "auto", "native", "emulated"
MODES = (AUTO, NATIVE, EMULATED)
CACHE_FILE = "proxy-comm-cache.json"
PROBE_TIMEOUT = 120.0
KERNELS = "sgl_kernel"  # the module SGLang's CUDA kernels install as
# The SGLang flags native mode hands to SGLang's group (the worker's --native-flags), by the
# argument of init_model_parallel_group they set (``native_group`` finds its spelling).
NATIVE_FLAGS = ("disable-custom-all-reduce", "enable-mscclpp", "enable-torch-symm-mem")
CPU_ENGINE_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}  # SGLang's switch for its CPU engine

# Paths the native mode still cannot run as the server does.
NATIVE_NOT_MODELLED = {
    dispatch.NCCL_SYMM: "NCCL symmetric memory registers the server's activations from SGLang's "
                        "symmetric pool; the proxy's tensors are not allocated there",
    dispatch.TORCH_SYMM_MULTIMEM: dispatch.NOT_MODELLED[dispatch.TORCH_SYMM_MULTIMEM],
    dispatch.FUSION_MNNVL: dispatch.NOT_MODELLED[dispatch.FUSION_MNNVL],
    dispatch.FUSION_CUTEDSL: "FlashInfer's CuTe DSL fusion is part of SGLang's layers, not of "
                             "its distributed layer",
}
FUSION_NOTE = ("fusion in native mode: FlashInfer's fused all-reduce + residual add + RMSNorm "
               "lives in SGLang's layers (its workspace is built by the model runner from the "
               "server's runtime context), not in the distributed layer; the proxy runs SGLang's "
               "GroupCoordinator.all_reduce, then the add and the RMSNorm as separate kernels")


def not_modelled(mode: str) -> Mapping[str, str]:
    """The paths a mode cannot run, with the reason."""
    return NATIVE_NOT_MODELLED if mode == NATIVE else dispatch.NOT_MODELLED


@dataclass(frozen=True)
class Availability:
    """Whether native mode can run here, and what the installed SGLang has."""

    ok: bool
    reason: str  # why not, or what was found
    version: str | None = None  # the installed SGLang's version
    kernels: str | None = None  # the installed sgl_kernel's version
    capabilities: dict[str, bool] = field(default_factory=dict)  # communicator modules present

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Availability:
        caps = data.get("capabilities") or {}
        return cls(bool(data.get("ok")), str(data.get("reason") or ""),
                   data.get("version"), data.get("kernels"),
                   {str(k): bool(v) for k, v in dict(caps).items()})


@dataclass(frozen=True)
class Mode:
    """The mode a trial runs, as resolved from ``--proxy-comm``."""

    name: str  # native | emulated
    requested: str  # auto | native | emulated
    reason: str
    available: Availability

    def record(self) -> dict[str, Any]:
        """What the plan's notes and the trial's rounds carry about the mode."""
        return {"proxy_comm": self.name, "proxy_comm_requested": self.requested,
                "proxy_comm_reason": self.reason, "sglang_version": self.available.version}

    def note(self) -> str:
        return f"proxy comm: {self.name} ({self.requested}: {self.reason})"


def _version(dist: str) -> str | None:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(dist)
    return None


@functools.cache
def _module_version(module: str) -> str | None:
    """The version of the distribution that installs ``module`` (whatever it is named)."""
    for dist in importlib.metadata.packages_distributions().get(module, []):
        found = _version(dist)
        if found:
            return found
    return None


def _missing() -> Availability | None:
    """A cheap answer, without importing anything, where a part is not installed at all."""
    if importlib.util.find_spec("sglang") is None:
        return Availability(False, "SGLang is not installed")
    version = _version("sglang")
    if importlib.util.find_spec(KERNELS) is None:
        return Availability(False, f"SGLang {version}'s kernels ({KERNELS}) are not installed",
                            version)
    return None


Probe = Callable[[bool], Availability]


def run_probe(cuda: bool) -> Availability:
    """``python -m launchers.proxy.comm.native_probe`` in a subprocess, GPUs hidden."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "launchers.proxy.comm.native_probe"]
    try:
        done = subprocess.run(argv + (["--cuda"] if cuda else []), capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Availability(False, f"the probe of SGLang's distributed layer took over "
                                   f"{PROBE_TIMEOUT:.0f} s")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Availability(False, f"the probe of SGLang's distributed layer failed "
                                   f"(exit {done.returncode}): {tail}")
    return Availability.from_json(json.loads(lines[-1]))


_ANSWERS: dict[str, Availability] = {}


def _key(cuda: bool) -> str:
    return json.dumps([sys.executable, _version("sglang"), _module_version(KERNELS), cuda])


def _read_cache(path: Path, key: str) -> Availability | None:
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        entry = json.loads(path.read_text()).get(key)
        if isinstance(entry, dict):
            return Availability.from_json(entry)
    return None


def _write_cache(path: Path, key: str, answer: Availability) -> None:
    """Merge the answer into the file (temp file, rename: concurrent trials never tear it)."""
    with contextlib.suppress(OSError, ValueError):
        data: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(path.read_text())
            data = loaded if isinstance(loaded, dict) else {}
        data[key] = answer.to_json()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


def availability(cuda: bool, cache: Path | None = None, probe: Probe = run_probe
                 ) -> Availability:
    """Whether native mode can run here (``cuda``: on GPUs). Kept per process and, with
    ``cache``, in that file."""
    missing = _missing()
    if missing is not None:
        return missing
    key = _key(cuda)
    if key in _ANSWERS:
        return _ANSWERS[key]
    answer = _read_cache(cache, key) if cache is not None else None
    if answer is None:
        answer = probe(cuda)
        if cache is not None:
            _write_cache(cache, key, answer)
    _ANSWERS[key] = answer
    return answer


def resolve(requested: str, cuda: bool, cache: Path | None = None, probe: Probe = run_probe
            ) -> Mode:
    """The mode for ``--proxy-comm requested``. ``native`` where it cannot run stays native,
    with the reason: ``ProxyArgs.checks`` and preflight refuse it (never silently emulated)."""
    if requested == EMULATED:
        version = _version("sglang") if importlib.util.find_spec("sglang") else None
        return Mode(EMULATED, requested, "asked for", Availability(False, "not probed", version))
    found = availability(cuda, cache, probe)
    if found.ok:
        return Mode(NATIVE, requested, f"SGLang {found.version}'s distributed layer and "
                                       "kernels import", found)
    if requested == NATIVE:
        return Mode(NATIVE, requested, f"unavailable: {found.reason}", found)
    return Mode(EMULATED, requested, found.reason, found)


# ---------------------------------------------------------------- the plan's part


@dataclass(frozen=True)
class PlanPart:
    """What native mode adds to a plan: worker flags, environment, notes."""

    argv: tuple[str, ...]
    env: dict[str, str]
    notes: tuple[str, ...]


def inherited_env(mode: Mode, inherited: Mapping[str, str], cuda: bool) -> dict[str, str]:
    """The environment the dispatch reads unset variables from: native mode keeps NVLink
    multicast off (as the emulated paths never use it) unless the configuration or the caller
    sets TORCH_SYMM_MEM_DISABLE_MULTICAST."""
    env = dict(inherited)
    if mode.name == NATIVE and cuda:
        env.setdefault(MULTICAST_OFF_ENV, "1")
    return env


def refusal(mode: Mode) -> str | None:
    """Why ``--proxy-comm native`` cannot run here (None: it can, or the mode is not native)."""
    if mode.name == NATIVE and not mode.available.ok:
        return f"--proxy-comm native: {mode.available.reason}"
    return None


def plan_part(mode: Mode, config: Mapping[str, Any], *, cuda: bool, route: str,
              env: Mapping[str, str], unset: tuple[str, ...] = (), interconnect: str = "nvlink"
              ) -> PlanPart:
    """The worker's flags (``--proxy-comm``, ``--native-flags``), the variables native mode
    sets, and notes; ``route`` is the all-reduce path SGLang 0.5.23's rules predict, ``env``
    and ``unset`` the plan's variables so far."""
    argv = ["--proxy-comm", mode.name, "--proxy-comm-reason", mode.reason]
    notes = [mode.note()]
    if mode.name != NATIVE:
        return PlanPart(tuple(argv), {}, tuple(notes))
    added: dict[str, str] = {}
    if not cuda:
        added.update(CPU_ENGINE_ENV)
    elif MULTICAST_OFF_ENV not in env and (MULTICAST_OFF_ENV in unset
                                           or MULTICAST_OFF_ENV not in os.environ):
        added[MULTICAST_OFF_ENV] = "1"
        notes.append(f"native mode: {MULTICAST_OFF_ENV}=1 (NVLink multicast stays off, as in "
                     "the emulated paths)")
    try:
        settings = Settings.from_config(config, {})
    except ValueError:
        settings = Settings()  # preflight refuses the configuration
    flags = [name for name, on in zip(NATIVE_FLAGS, (
        settings.disable_custom_all_reduce, settings.enable_mscclpp,
        settings.enable_torch_symm_mem), strict=True) if on]
    if flags:
        argv += ["--native-flags", ",".join(flags)]
    caps = mode.available.capabilities
    notes.append(f"native mode: SGLang {mode.available.version} decides every collective; "
                 f"SGLang 0.5.23's rules predict {route}; the ranks record what served")
    if caps and not caps.get("pcie_ipc_ar", True) and settings.pcie_ipc:
        notes.append(f"SGLang {mode.available.version} has no PCIe-IPC all-reduce "
                     "(device_communicators/pcie_ipc_ar): SGLANG_ENABLE_PCIE_IPC_ALLREDUCE "
                     "changes nothing there")
    if route == dispatch.FUSION:
        notes.append(FUSION_NOTE)
    if interconnect == "pcie" and cuda:
        notes.append("native mode under --interconnect pcie: SGLang asks NVML about NVLink "
                     "itself, so its own rules see the GPUs as they are; only NCCL runs as on a "
                     "PCIe box (NCCL_P2P_DISABLE=1)")
    return PlanPart(tuple(argv), added, tuple(notes))
