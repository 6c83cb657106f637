"""The workloads servetune knows: each one's argument model, by its ``kind``.

The engine (tuner/) reaches a workload only through this registry and the ``WorkloadArgs``
API (build, checks, production port, reference args, shape), never by its name. The two
workloads never import each other; this module is the one place that knows both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field

from launchers.base import WorkloadArgs
from launchers.options import CliOption, merged
from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs

ARGS_MODELS: tuple[type[WorkloadArgs], ...] = (SGLangArgs, ProxyArgs)
DEFAULT_KIND = "proxy"  # the embedded default: needs no server

# The union the experiment spec holds, told apart by ``kind``.
AnyWorkloadArgs = Annotated[SGLangArgs | ProxyArgs, Field(discriminator="kind")]


def cli_options() -> list[CliOption]:
    """Every workload's command-line options, in the registry's order, a shared one once."""
    return merged(m.cli_options for m in ARGS_MODELS)


def kinds() -> list[str]:
    return [_kind(m) for m in ARGS_MODELS]


def _kind(model: type[WorkloadArgs]) -> str:
    return str(model.model_fields["kind"].default)


def args_model(kind: str) -> type[WorkloadArgs]:
    for model in ARGS_MODELS:
        if _kind(model) == kind:
            return model
    raise KeyError(f"unknown workload {kind!r}; workloads: {', '.join(kinds())}")


def kind_for(given: Iterable[str]) -> str:
    """The workload that CLI options ``given`` (argparse dests) select: the first whose
    selector options are all given (``--model``: sglang), else the default."""
    present = set(given)
    for model in ARGS_MODELS:
        if model.cli_selectors and set(model.cli_selectors) <= present:
            return _kind(model)
    return DEFAULT_KIND


def default_args() -> WorkloadArgs:
    return args_model(DEFAULT_KIND).model_validate({"kind": DEFAULT_KIND})


def screen_args(shape: str) -> WorkloadArgs:
    """The proxy's args for screening a server's NCCL settings with the server model's shape."""
    return ProxyArgs(model=shape)


def screen_shape_option() -> CliOption:
    """The option that names the screen's shape where the experiment is another workload's
    (the proxy's ``--model-config``)."""
    return next(o for o in ProxyArgs.cli_options if o.field == "model")


def screenable(args: WorkloadArgs) -> bool:
    """Whether a proxy screen can go before this workload's trials (not before the proxy's)."""
    return not isinstance(args, ProxyArgs)
