"""GPU hygiene through NVML: the trial's GPUs hold no foreign process before it starts, and
their memory comes back after it stops. Without NVML (a CPU machine) this says so once."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launchers.failures import Failure, FailureKind, TrialFailed

log = logging.getLogger(__name__)
_nvml_state: dict[str, Any] = {}


def _nvml(tell: bool = True) -> Any | None:
    """The initialised pynvml module, or None when NVML is unavailable (told once, to the
    first caller that checks hygiene; counting GPUs alone is no reason to warn)."""
    if "module" not in _nvml_state:
        module = None
        try:
            import pynvml

            pynvml.nvmlInit()
            module = pynvml
        except Exception as err:  # ImportError, NVMLError_LibraryNotFound, driver missing
            _nvml_state["error"] = err
        _nvml_state["module"] = module
    if _nvml_state["module"] is None and tell and not _nvml_state.get("told"):
        _nvml_state["told"] = True
        log.warning("NVML not available (%s): GPU hygiene checks are skipped",
                    _nvml_state.get("error"))
    return _nvml_state["module"]


def available() -> bool:
    return _nvml() is not None


def device_count() -> int:
    nvml = _nvml(tell=False)
    return int(nvml.nvmlDeviceGetCount()) if nvml else 0


def _handle(nvml: Any, gpu: str) -> Any:
    if gpu.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(gpu)
    return nvml.nvmlDeviceGetHandleByIndex(int(gpu))


def memory_total(gpus: Sequence[str]) -> int | None:
    """The smallest total memory among ``gpus``, in bytes; None without NVML or GPUs."""
    nvml = _nvml()
    if nvml is None or not gpus:
        return None
    try:
        return min(int(nvml.nvmlDeviceGetMemoryInfo(_handle(nvml, g)).total) for g in gpus)
    except Exception as err:  # NVMLError (an id NVML does not know), ValueError
        log.warning("NVML could not read the memory of GPUs %s: %s", list(gpus), err)
        return None


@dataclass(frozen=True)
class GpuState:
    gpu: str
    used_bytes: int
    pids: tuple[int, ...]


def snapshot(gpus: Sequence[str]) -> list[GpuState]:
    nvml = _nvml()
    if nvml is None:
        return []
    states = []
    for gpu in gpus:
        handle = _handle(nvml, gpu)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        states.append(GpuState(gpu, int(memory.used), tuple(int(p.pid) for p in procs)))
    return states


def wait_clean(gpus: Sequence[str], timeout: float, allowed_pids: frozenset[int] = frozenset()
               ) -> list[GpuState]:
    """Wait until no foreign process runs on ``gpus``; raise TrialFailed(gpu_busy) naming them."""
    deadline = time.monotonic() + timeout
    while True:
        states = snapshot(gpus)
        busy = {s.gpu: [p for p in s.pids if p not in allowed_pids] for s in states}
        busy = {g: p for g, p in busy.items() if p}
        if not busy:
            return states
        if time.monotonic() > deadline:
            named = "; ".join(f"GPU {g}: pids {', '.join(map(str, p))}" for g, p in busy.items())
            raise TrialFailed(Failure(FailureKind.GPU_BUSY,
                                      f"GPUs still in use after {timeout:.0f} s: {named}"))
        time.sleep(0.5)


def wait_memory_back(before: Sequence[GpuState], timeout: float, slack_bytes: int = 512 << 20
                     ) -> list[str]:
    """After a trial: wait until each GPU's used memory is back near its level before the
    trial. Returns warnings for GPUs that did not come back."""
    if not before:
        return []
    deadline = time.monotonic() + timeout
    while True:
        after = {s.gpu: s for s in snapshot([s.gpu for s in before])}
        late = [(b, after[b.gpu]) for b in before
                if after[b.gpu].used_bytes > b.used_bytes + slack_bytes]
        if not late:
            return []
        if time.monotonic() > deadline:
            return [f"GPU {b.gpu}: {a.used_bytes >> 20} MiB used after the trial, "
                    f"{b.used_bytes >> 20} MiB before (pids {list(a.pids)})" for b, a in late]
        time.sleep(0.2)
