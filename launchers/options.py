"""A workload's command-line options, declared by the workload beside its args model
(``WorkloadArgs.cli_options``) and assembled by the CLI (tuner/cli): the flag, the field of
the args model it sets, and how argparse reads it. No argparse here: the CLI adds them.

The options every server workload shares (``PORT``, ``READY_TIMEOUT``) are declared once
here; the CLI adds an option two workloads declare once (they must declare it alike)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

# How the CLI reads an option's text into the field's value (tuner/cli/args.py does it: paths
# are the user's, relative to the folder servetune was started in).
TEXT = "text"  # as given
WORDS = "words"  # repeatable, each shell-split: one list of words
COMMAND = "command"  # a command line: its program and the files it names made absolute
INT_LIST = "int_list"  # integers separated by commas
OFF = "off"  # a --no-... flag: the field is False when it is given
MODEL = "model"  # a path where it looks like one, else a hub id (org/name)
PATH_OR_NAME = "path_or_name"  # one of ``names`` as given, else a path
ACCEPT_LENGTHS = "accept_lengths"  # a server experiment's folder: its measured accept lengths


@dataclasses.dataclass(frozen=True)
class CliOption:
    """``--flag`` sets ``field`` of the workload's args; ``argparse`` holds what
    ``add_argument`` takes besides the flag (type, action, default, metavar, choices, help)."""

    flag: str
    field: str
    argparse: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    value: str = TEXT  # how the CLI reads the text (the kinds above)
    names: Callable[[], Collection[str]] | None = None  # PATH_OR_NAME: the names kept

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
