"""Where a verify step's time goes, read from a torch.profiler Chrome trace (JSON, or gzipped).

Steps are found through their spans, whose names each workload owns and passes in as
``StepSpans`` (``launchers.sglang.profile.STEP_SPANS``: SGLang's ``step[VERIFY bs=N]`` /
``step[DRAFT bs=N]``; ``launchers.proxy.protocol.STEP_SPANS``: the proxy's ``servetune.verify``,
``servetune.compute_only``, ``servetune.comm_alone``); ``record_function`` spans, category
``user_annotation``. Without spans given, both workloads' are used.

On a GPU trace the step's work is the GPU activity (kernels, memcpy, memset) whose
correlation id matches a CUDA runtime or driver call made inside the span, on the span's
thread (a CUDA graph replay is one ``cudaGraphLaunch`` whose kernels all carry its id). Where a
trace has no such links, the kernels inside the span's ``gpu_user_annotation`` window are used.
The step's length is its GPU window: first start to last end of its work. On a CPU-only trace
(the proxy over gloo) the work is the operators inside the span on its thread, and the length
is the span's.

The window is cut into classes, each instant going to the first class active then:
  collective        NCCL kernels (``nccl*``); on CPU, gloo/c10d collectives and the spans a
                    workload wraps one collective in (``StepSpans.comm_prefixes``)
  custom_allreduce  other all-reduce/all-gather kernels: custom, one-shot/two-shot, Lamport,
                    MSCCL++, FlashInfer/TRT-LLM fused allreduce+norm, torch symmetric memory
                    one-shot/two-shot (name patterns in ``events``)
  compute           every other kernel (GEMM, attention, MoE, norms, ...)
  memcpy            memory copies and sets
  gap               nothing running: launch overhead, idle, waiting on the host
so the classes add up to the step exactly; ``kernel_us`` keeps the plain sums per class, which
exceed the window where streams overlap. Communication = collective + custom_allreduce;
other = memcpy + gap.

Modules: ``events`` (reading a trace, span names, kernel classes), ``steps`` (one rank's steps
and their split), ``summary`` (means over steps and ranks; ``read``), ``fixture`` (``trim``).
No Ray, no torch: this package reads JSON only.
"""

from launchers.trace.events import (
    CLASSES,
    COMMUNICATION,
    CUSTOM_ALLREDUCE,
    LABELS,
    OTHER,
    StepSpans,
    TraceError,
    classify_cpu_op,
    classify_kernel,
    load_events,
    step_kind,
)
from launchers.trace.fixture import trim
from launchers.trace.steps import Step, steps_of
from launchers.trace.summary import Breakdown, Summary, combine, read, summarize

__all__ = ["CLASSES", "COMMUNICATION", "CUSTOM_ALLREDUCE", "LABELS", "OTHER", "Breakdown",
           "Step", "StepSpans", "Summary", "TraceError", "classify_cpu_op", "classify_kernel",
           "combine", "load_events", "read", "step_kind", "steps_of",
           "summarize", "trim"]
