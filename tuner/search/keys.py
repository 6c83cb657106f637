"""A configuration's identity: the key two equal configurations share."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from search_spaces.constraints import resolved_alike
from search_spaces.knobs import Value

Config = dict[str, Value]
# A configuration's identity for the search: two configurations the server would run alike
# share it (the workload's own resolution); None where it cannot tell (then alike_key).
Identity = Callable[[Mapping[str, Value]], "str | None"]
# Why the workload's own checks, asked on the driver, refuse a configuration (SGLang's parser
# and resolution: it would not start); None where they accept it or cannot be asked. A fact
# about that configuration alone, so it teaches the failure memory nothing about a value.
Refusal = Callable[[Mapping[str, Value]], "str | None"]
# What the workload resolves a configuration to, as values of the space's knobs (SGLang: its
# ServerArgs for the flag knobs, partners.knob_values); None where it cannot tell. Read for
# the baseline: a lever refused alone is proposed with its partners at these values.
Resolved = Callable[[Mapping[str, Value]], "Mapping[str, Value] | None"]


def config_key(config: Mapping[str, Value]) -> str:
    return json.dumps(sorted(config.items(), key=lambda kv: kv[0]), default=str)


def alike_key(config: Mapping[str, Value]) -> str:
    """The key of the configuration as SGLang's known rules resolve it."""
    return config_key(resolved_alike(config))
