"""The words of the terminal's progress lines: short knob names, a config's settings, values
(no Ray here; ``tuner.run.progress`` prints them as trials move)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces.knobs import DUMMY, WEIGHTS
from tuner.output.ran import same


def fmt_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def short_name(knob: str) -> str:
    """``NCCL_MAX_NCHANNELS`` -> ``MAX_NCHANNELS``, ``--enable-symm-mem`` -> ``enable-symm-mem``."""
    return knob.removeprefix("NCCL_").removeprefix("--")


def settings_text(config: Mapping[str, Any], knobs: Sequence[str],
                  ran: Mapping[str, Any] | None = None) -> str:
    """The knobs a config sets (not unset, not off), with short names; with ``ran`` (what
    the trial's server resolved, tuner.output.ran), what ran, the asked value beside it
    where the two differ (``num-draft-tokens=6 (asked 2)``)."""
    ran = ran or {}
    changed = []
    for k, asked in config.items():
        if k not in knobs:
            continue
        value = ran.get(k, asked)
        other = not same(k, asked, value)
        note = f" (asked {asked})" if other and asked not in (None, False) else \
            " (the server's choice)" if other else ""
        if value is None or value is False:
            if other:
                changed.append(f"{short_name(k)}=unset{note}")
            continue
        changed.append((f"{short_name(k)}={value}" if value is not True else short_name(k))
                       + note)
    dummy = " [dummy weights]" if config.get(WEIGHTS) == DUMMY else ""
    return (" ".join(changed) or "every knob unset") + dummy
