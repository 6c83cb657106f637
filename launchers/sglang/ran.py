"""What a trial's server ran for each flag knob of its configuration: the value SGLang
resolved, from ``server_resolved.json`` (``/server_info``, once the server is up) or else
``resolved.json`` (the preflight's resolution). SGLang resolves some settings itself:
with ``--speculative-eagle-topk 1`` the draft tokens are the steps + 1 whatever was asked."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launchers.sglang import resolved
from search_spaces.knobs import Value


def dest(flag: str) -> str:
    """The ``ServerArgs`` field of a flag (argparse's dest): ``--a-b`` -> ``a_b``."""
    return flag.removeprefix("--").replace("-", "_")


def resolved_fields(trial_dir: Path) -> dict[str, Any]:
    """SGLang's resolved arguments for the trial: the server's own where it got that far."""
    return next((data["resolved"] for _, data in resolved.records(trial_dir)
                 if isinstance(data.get("resolved"), dict) and data["resolved"]), {})


def ran_values(config: Mapping[str, Value], trial_dir: Path) -> dict[str, Value]:
    """Per flag knob of ``config`` (composites and env left out: SGLang's arguments do not
    hold them), the plain value SGLang resolved; {} when the trial recorded none."""
    fields = resolved_fields(trial_dir)
    out: dict[str, Value] = {}
    for name in config:
        if not name.startswith("--") or dest(name) not in fields:
            continue
        value = fields[dest(name)]
        if value is None or isinstance(value, (bool, int, str)):
            out[name] = value
    return out
