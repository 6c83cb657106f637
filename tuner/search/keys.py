"""A configuration's identity: the key two equal configurations share."""

from __future__ import annotations

import json
from collections.abc import Mapping

from search_spaces.knobs import Value

Config = dict[str, Value]


def config_key(config: Mapping[str, Value]) -> str:
    return json.dumps(sorted(config.items(), key=lambda kv: kv[0]), default=str)
