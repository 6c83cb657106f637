"""Running one proxy trial the way the engine does: plan, preflight, start, ready, rounds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from launchers.base import TrialContext
from launchers.proxy.launcher import ProxyRunning, ProxyWorkload
from search_spaces.knobs import Value

REQUIRED = ("verify_ms", "verify_p10_ms", "verify_p90_ms", "compute_ms", "exposed_comm_ms",
            "exposed_comm_share", "exposed_per_allreduce_us", "comm_alone_ms",
            "comm_alone_per_allreduce_us", "allgather_alone_ms", "est_tok_s",
            "est_accept_length", "assumed_draft_ms", "bytes_per_pass", "hbm_floor_ms",
            "scaled", "graph", "ranks", "device", "interconnect", "allreduce_path",
            "allgather_path", "sglang_allreduce_path", "sglang_allgather_path",
            "allreduce_count", "allgather_count")


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
