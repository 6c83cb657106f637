"""Running one proxy trial the way the engine does: plan, preflight, start, ready, rounds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from launchers.base import TrialContext
from launchers.proxy.launcher import ProxyRunning, ProxyWorkload
from search_spaces.knobs import Value

REQUIRED = ("verify_ms", "verify_p10_ms", "verify_p90_ms", "allreduce_ms", "compute_ms",
            "allreduce_share", "est_tok_s", "assumed_accept_length", "assumed_draft_ms",
            "bytes_per_pass", "hbm_floor_ms", "scaled", "per_allreduce_us", "graph", "ranks",
            "device")


def run_trial(workload: ProxyWorkload, config: Mapping[str, Value], ctx: TrialContext,
              rounds: int = 1, extra_argv: Sequence[str] = (), ready_timeout: float = 120.0
              ) -> tuple[ProxyRunning, dict[str, Any], list[dict[str, Any]]]:
    plan = workload.plan(config, ctx)
    if extra_argv:
        plan = replace(plan, argv=(*plan.argv, *extra_argv))
    workload.preflight(plan, ctx)
    running = workload.start(plan, ctx)
    with running:
        running.wait_ready(ready_timeout)
        results = [running.measure(i) for i in range(rounds)]
        return running, dict(running.info), results
