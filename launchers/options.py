"""A workload's command-line options, declared by the workload beside its args model
(``WorkloadArgs.cli_options``) and assembled by the CLI (tuner/cli): the flag, the field of
the args model it sets, and how argparse reads it. No argparse here: the CLI adds them.

The options every server workload shares (``PORT``, ``READY_TIMEOUT``) are declared once
here; the CLI adds an option two workloads declare once (they must declare it alike)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class CliOption:
    """``--flag`` sets ``field`` of the workload's args; ``argparse`` holds what
    ``add_argument`` takes besides the flag (type, action, default, metavar, choices, help)."""

    flag: str
    field: str
    argparse: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def dest(self) -> str:
        """argparse's name of the option's value (``--no-fast-start``: ``no_fast_start``)."""
        return self.flag.lstrip("-").replace("-", "_")


PORT = CliOption("--port", "port", {
    "type": int, "help": "server port (default: a free port per trial, so that experiments "
    "never collide; best/launch.sh uses the server's own default)"})
READY_TIMEOUT = CliOption("--ready-timeout", "ready_timeout", {
    "type": float, "help": "seconds to wait for readiness"})


def merged(declared: Iterable[Iterable[CliOption]]) -> list[CliOption]:
    """Every workload's options in the order declared, one declared by several once; two
    different declarations of one flag are an error of the workloads'."""
    out: dict[str, CliOption] = {}
    for options in declared:
        for option in options:
            known = out.setdefault(option.flag, option)
            if known != option:
                raise ValueError(f"{option.flag}: declared differently by two workloads")
    return list(out.values())
