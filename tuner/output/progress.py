"""The words of the terminal's progress lines: short knob names, a config's settings, values
(no Ray here; ``tuner.run.progress`` prints them as trials move)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from search_spaces.knobs import DUMMY, WEIGHTS


def fmt_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def short_name(knob: str) -> str:
    """``NCCL_MAX_NCHANNELS`` -> ``MAX_NCHANNELS``, ``--enable-symm-mem`` -> ``enable-symm-mem``."""
    return knob.removeprefix("NCCL_").removeprefix("--")


def settings_text(config: Mapping[str, Any], knobs: Sequence[str]) -> str:
    """The knobs a config sets (not unset, not off), with short names."""
    changed = [f"{short_name(k)}={v}" if v is not True else short_name(k)
               for k, v in config.items()
               if k in knobs and v is not None and v is not False]
    dummy = " [dummy weights]" if config.get(WEIGHTS) == DUMMY else ""
    return (" ".join(changed) or "baseline (no overrides)") + dummy
