"""One launch of one configuration, the way a trial and the profiler both do it (no Ray):

    plan -> plan.json -> preflight -> GPUs clean -> start -> ready -> warm-up
    ... the caller measures ...
    teardown, on every path: the server's tree, anything still carrying the trial's marker
    (grandchildren in new sessions), and the GPUs' memory back.

``Launch`` is a context manager: ``with Launch(...) as running: running.measure(0)``. What
it learned on the way (the plan, preflight warnings, timings) stays on the object, also when
a step fails, so that the caller can record it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType

from launchers import gpu, process
from launchers.base import LaunchPlan, Running, TrialContext, Workload
from search_spaces.knobs import Value
from tuner.record.trial_file import write_plan


@dataclass(frozen=True)
class Limits:
    """How long each step may take (what a trial gets from the experiment's spec)."""

    ready_timeout: float = 1800.0
    stop_grace: float = 10.0
    gpu_clean_timeout: float = 60.0


@dataclass
class Launch:
    workload: Workload
    config: Mapping[str, Value]
    ctx: TrialContext
    limits: Limits = field(default_factory=Limits)
    plan: LaunchPlan | None = None
    running: Running | None = None
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    _gpus_before: list[gpu.GpuState] = field(default_factory=list)
    _t0: float = 0.0
    _down: bool = False

    def __enter__(self) -> Running:
        self._t0 = time.monotonic()
        try:
            return self._start()
        except BaseException:
            self.teardown()
            raise

    def _start(self) -> Running:
        ctx, folder = self.ctx, self.ctx.trial_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.plan = self.workload.plan(self.config, ctx)
        write_plan(folder, self.plan.to_json())
        self.warnings += self.workload.preflight(self.plan, ctx) or []
        if ctx.gpu_ids:
            self._gpus_before = gpu.wait_clean(ctx.gpu_ids, self.limits.gpu_clean_timeout)
        self.timings["setup_s"] = time.monotonic() - self._t0
        self.running = self.workload.start(self.plan, ctx)
        self.running.process.stop_grace = self.limits.stop_grace
        self.timings["ready_s"] = self.running.wait_ready(self.limits.ready_timeout)
        t_warm = time.monotonic()
        self.running.warmup()
        self.timings["warmup_s"] = time.monotonic() - t_warm
        self.warnings += self.running.ran_notes()
        return self.running

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.teardown()

    def teardown(self) -> None:
        """Stop everything this launch started; idempotent. The server's own stop report
        (cached by its process) and the sweep after it make ``teardown_s``."""
        if self._down:
            return
        self._down = True
        t_down = time.monotonic()
        stop_s = 0.0
        if self.running is not None:
            self.running.stop()
            stopped = self.running.process.stop()  # the first stop's report (cached)
            stop_s = stopped.seconds
            if stopped.other_sessions:
                self.warnings.append(f"{len(stopped.other_sessions)} processes of the server "
                                     "ran in a session of their own (setsid): stopped by marker")
        outlived = process.reap_all(self.ctx.marker, grace=min(self.limits.stop_grace, 3.0),
                                    exact=True)
        if outlived:
            self.warnings.append(f"{len(outlived)} processes outlived the server's stop "
                                 "(new sessions?): reaped by marker")
        if self._gpus_before:
            self.warnings += gpu.wait_memory_back(self._gpus_before, timeout=30.0)
            self._gpus_before = []
        self.timings["teardown_s"] = stop_s + time.monotonic() - t_down
