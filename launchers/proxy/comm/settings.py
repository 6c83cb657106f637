"""The settings SGLang's allreduce dispatch reads, taken from a configuration.

A configuration names knobs; ``search_spaces.knobs.expand_config`` (where this checkout has
it) turns a composite knob such as ``allreduce-backend`` into the primitive flags and SGLANG_*
variables it stands for, and passes primitives through. Until that function lands the
configuration is read as it is (primitives only). What SGLang reads from the primitives, with
its defaults and its env registry's parsing, is SGLang's rule and lives with the release's
other rules (``launchers/sglang/release/allreduce_settings.py``, ``env.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, cast

from launchers.sglang.release import allreduce_settings
from launchers.sglang.release.allreduce_settings import (
    ENV_BOOL,
    ENV_INT,
    FLAGS,
    MODELLED_ENV,
    MULTICAST_OFF_ENV,
)
from launchers.sglang.release.env import parse_bool, parse_int

__all__ = ["ENV_BOOL", "ENV_INT", "FLAGS", "MODELLED_ENV", "MULTICAST_OFF_ENV", "Settings",
           "expand", "parse_bool", "parse_int"]


def _expander() -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """search_spaces.knobs.expand_config where this checkout has it."""
    try:
        knobs = importlib.import_module("search_spaces.knobs")
    except ImportError:
        return None
    found = getattr(knobs, "expand_config", None)
    return cast("Callable[[Mapping[str, Any]], dict[str, Any]]", found) if callable(found) else None


def expand(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration in primitive knobs: expand_config's answer, or the config itself."""
    expander = _expander()
    return dict(config) if expander is None else dict(expander(config))


class Settings(allreduce_settings.Settings):
    """SGLang's dispatch settings, read from a configuration of any knobs."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    inherited: Mapping[str, str] | None = None) -> Settings:
        """The settings of a configuration (composites expanded), unset variables read from
        ``inherited``. Raises ValueError for a value SGLang would refuse."""
        return cls.from_primitives(expand(config), inherited)
