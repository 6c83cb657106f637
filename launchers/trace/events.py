"""Reading a Chrome trace: its events, which spans are steps, and the class of each kernel."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLASSES = ("collective", "custom_allreduce", "compute", "memcpy", "gap")
LABELS = {"collective": "NCCL collectives", "custom_allreduce": "custom/fused allreduce",
          "compute": "compute (GEMM, attention, MoE)", "memcpy": "memcpy/memset",
          "gap": "gaps (launch, idle)"}
COMMUNICATION = ("collective", "custom_allreduce")
OTHER = ("memcpy", "gap")

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
CPU_WORK_CATS = ("cpu_op", "user_annotation")
# Kernel names of all-reduce implementations other than NCCL's own (matched lower-case):
# SGLang's custom allreduce (cross_device_reduce_*, v2 one/two-shot push/pull), torch symmetric
# memory (c10d::symmetric_memory::one_shot_all_reduce_kernel, two_shot_..., multimem_...),
# FlashInfer's fused allreduce + RMSNorm (allreduce_fusion_kernel_*_lamport), MSCCL++. A bare
# "trtllm" is not among them: FlashInfer's trtllm-gen attention and MoE kernels carry it.
CUSTOM_ALLREDUCE = ("allreduce", "all_reduce", "cross_device_reduce", "oneshot", "one_shot",
                    "twoshot", "two_shot", "mscclpp", "custom_ar", "lamport", "allgather",
                    "all_gather", "reduce_scatter", "reducescatter", "multimem",
                    "symmetric_memory", "symm_mem", "ar_fusion")
CPU_COLLECTIVE = ("gloo", "c10d::", "nccl", "allreduce", "all_reduce", "allgather",
                  "all_gather", "record_param_comms", "reduce_scatter", "broadcast")


class TraceError(ValueError):
    """The file is not a Chrome trace servetune can read."""


@dataclass(frozen=True)
class StepSpans:
    """How one workload names its step spans: ``pattern`` matches a step span's name, its
    group ``stage`` is the step's kind (lower-cased) and its optional group ``bs`` the batch
    size; a CPU span whose name starts with one of ``comm_prefixes`` wraps one collective;
    ``aliases`` (lower-cased stage -> kind): the names other releases give a kind."""

    pattern: re.Pattern[str]
    comm_prefixes: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()

    def kind(self, name: str) -> tuple[str, int | None] | None:
        m = self.pattern.match(name)
        if m is None:
            return None
        bs = m.groupdict().get("bs")
        stage = m.group("stage").lower()
        return dict(self.aliases).get(stage, stage), int(bs) if bs is not None else None


def resolve(spans: Sequence[StepSpans] | None) -> tuple[StepSpans, ...]:
    """The step spans to look for: the ones the workload that wrote the trace declares
    (``Workload.step_spans``); none given, no span is a step."""
    return () if spans is None else tuple(spans)


def load_events(path: Path) -> list[dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace file, gzipped or not."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as err:
        raise TraceError(f"{path}: not a readable Chrome trace ({err})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def step_kind(name: str, spans: Sequence[StepSpans] | None = None
              ) -> tuple[str, int | None] | None:
    """(kind, batch size) of a step span's name, or None when the name is not a step."""
    for s in resolve(spans):
        kind = s.kind(name)
        if kind is not None:
            return kind
    return None


def classify_kernel(name: str, cat: str = "kernel") -> str:
    """The class of one piece of GPU work."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    low = name.lower()
    if low.startswith("nccl"):
        return "collective"
    if any(p in low for p in CUSTOM_ALLREDUCE):
        return "custom_allreduce"
    return "compute"


def classify_cpu_op(name: str, spans: Sequence[StepSpans] | None = None) -> str:
    low = name.lower()
    prefixes = [p for s in resolve(spans) for p in s.comm_prefixes]
    if any(name.startswith(p) for p in prefixes) or any(p in low for p in CPU_COLLECTIVE):
        return "collective"
    return "compute"


def x_events(events: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for e in events:
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            yield e


def dur(e: Mapping[str, Any]) -> float:
    d = e.get("dur", 0.0)
    return float(d) if isinstance(d, (int, float)) else 0.0


def correlation(e: Mapping[str, Any]) -> Any:
    args = e.get("args")
    return args.get("correlation") if isinstance(args, dict) else None
