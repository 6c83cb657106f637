"""SGLang's answers on one launch plan, asked through the experiment's cache (its parser, its
resolution at the plan's port, its env registry), and why they refuse the command. The trial's
preflight asks them, and so does the driver before it proposes a configuration."""

from __future__ import annotations

from collections.abc import Sequence

from launchers.base import LaunchPlan, TrialContext
from launchers.sglang import preflight as sglang_parser
from launchers.sglang.server_args import env_rejection

PREFLIGHT_CACHE = "preflight-cache.json"  # in the experiment's folder, beside the trials'

EnvAnswers = list[tuple[sglang_parser.EnvValue, sglang_parser.EnvResult]]
Answers = tuple[sglang_parser.PreflightResult, sglang_parser.Resolution | None, EnvAnswers]


def ask(plan: LaunchPlan, ctx: TrialContext, command_words: int, python: str | None
        ) -> Answers:
    """The parse of the plan's flags (its argv after the ``command_words`` of the server
    command), then unless it rejects them the resolution (at the plan's port), then unless
    that rejects them each ``SGLANG_*`` variable; in ``python``, SGLang's interpreter."""
    flags = list(plan.argv[command_words:])
    cache, experiment = ctx.trial_dir.parent / PREFLIGHT_CACHE, ctx.experiment
    parse = sglang_parser.check_argv(flags, python, cache, experiment)
    if parse.ok is False:
        return parse, None, []
    resolution = sglang_parser.resolve(flags, python, cache, experiment).at_port(plan.port)
    if resolution.ok is False:
        return parse, resolution, []
    env = sorted((k, v) for k, v in plan.env.items() if k.startswith("SGLANG_"))
    readings = sglang_parser.check_env(env, python, cache, experiment)
    return parse, resolution, list(zip(env, readings, strict=True))


def rejection(parse: sglang_parser.PreflightResult, resolution: sglang_parser.Resolution | None,
              readings: Sequence[tuple[sglang_parser.EnvValue, sglang_parser.EnvResult]]
              ) -> str | None:
    """Why SGLang's answers refuse a command: it would not start as meant. None: they accept
    it."""
    if parse.ok is False or resolution is None:
        return "SGLang rejected the command: " + parse.error
    if resolution.ok is False:  # SGLang's own checks (ServerArgs): it would not start
        return "SGLang's checks rejected the command: " + resolution.error
    for (name, text), reading in readings:
        reason = env_rejection(name, text, reading)
        if reason:
            return reason
    return None
