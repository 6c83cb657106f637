"""The SGLang command as the user serves it (best/launch.sh), not as a trial measures it.

A trial adds what only its measurement needs: decode CUDA graphs for the measured
concurrency levels alone (``--cuda-graph-bs-decode``), SGLang's own warm-up skipped and the
prefill graphs off (startup.fast_start_flags), ``--enable-metrics`` with its timers, NCCL's
debug log, the millisecond log times and a ``--host`` of its own. The production command is
the user's (their model, server args, host when they gave one, port) plus the configuration,
on the checkpoint's weights (Workload.production_plan drops the weight policy's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from launchers.base import LaunchPlan, TrialContext, Workload
from search_spaces.knobs import Value

# The switches of SGLangArgs that a trial turns on only to measure.
MEASURING_ONLY = {"fast_start": False, "capture_concurrency": False, "metrics": False,
                  "nccl_debug": False}


def without_flag(argv: Sequence[str], flag: str) -> tuple[str, ...]:
    """``argv`` without ``flag`` and its value (``--flag v`` and ``--flag=v`` alike)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        elif not word.startswith(flag + "="):
            out.append(word)
    return tuple(out)


def production_plan(serving: Workload, config: Mapping[str, Value], ctx: TrialContext,
                    host_given: bool) -> LaunchPlan:
    """``config`` as the user launches it: the plan of ``serving`` (the workload with every
    MEASURING_ONLY switch off) without its measuring env; ``--host`` only when the user
    gave one (else SGLang's default)."""
    plan = Workload.production_plan(serving, config, ctx)
    if host_given:
        return plan

    def default_host(node: LaunchPlan) -> LaunchPlan:
        return replace(node, argv=without_flag(node.argv, "--host"))

    return replace(default_host(plan), peers=tuple(default_host(p) for p in plan.peers))
