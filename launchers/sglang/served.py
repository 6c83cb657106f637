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
from search_spaces.knobs import Value, expand_config

# The switches of SGLangArgs that a trial turns on only to measure.
MEASURING_ONLY = {"fast_start": False, "capture_concurrency": False, "metrics": False,
                  "nccl_debug": False}


def without_flag(argv: Sequence[str], *flags: str) -> tuple[str, ...]:
    """``argv`` without each of ``flags`` and its values (``--flag v [v ...]`` and
    ``--flag=v`` alike: the words up to the next ``--`` word)."""
    out: list[str] = []
    dropping = False
    for word in argv:
        if word.startswith("--"):
            dropping = word.split("=", 1)[0] in flags
        if not dropping:
            out.append(word)
    return tuple(out)


def overridden(server_args: Sequence[str], config: Mapping[str, Value]) -> tuple[str, ...]:
    """The user's server args without the flags the configuration sets (a value of the
    trial's overrides the user's; unset leaves the user's)."""
    return without_flag(server_args, *(name for name, value in expand_config(config).items()
                                       if name.startswith("--") and value not in (None, False)))


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
