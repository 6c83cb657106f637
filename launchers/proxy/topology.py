"""What the plan needs to know about the trial's GPUs, read through NVML (no CUDA context in
the planning process): whether every pair is linked by NVLink (SGLang's ``is_full_nvlink``
asks NVML the same question) and the compute capability. Unknown where NVML is missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Topology:
    nvlink: bool | None  # every GPU pair over NVLink; None: unknown
    sm_major: int | None  # compute capability major; None: unknown


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: unknown, said in the plan's notes
        return None
    return pynvml


def probe(gpu_ids: Sequence[str]) -> Topology:
    """NVLink between every pair of ``gpu_ids`` (indices or UUIDs) and their capability."""
    nvml = _nvml()
    if nvml is None or not gpu_ids:
        return Topology(None, None)
    try:
        handles = [nvml.nvmlDeviceGetHandleByUUID(g) if g.startswith("GPU-")
                   else nvml.nvmlDeviceGetHandleByIndex(int(g)) for g in gpu_ids]
        major = int(nvml.nvmlDeviceGetCudaComputeCapability(handles[0])[0])
        nvlink = all(
            nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            == nvml.NVML_P2P_STATUS_OK
            for i, a in enumerate(handles) for b in handles[i + 1:])
    except Exception:  # an NVML without these calls: unknown
        return Topology(None, None)
    return Topology(nvlink, major)
