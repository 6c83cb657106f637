"""servetune.json: the experiment's spec as its folder keeps it, with its schema version.
The model is ``tuner.spec.ExperimentSpec``, which reads and writes itself through here (its
``load`` and ``save``): this module names no model of its own, so that the spec, below
every room, imports no record that imports it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from tuner.record.base import SCHEMA_VERSION, VERSION_KEY
from tuner.record.files import SPEC_JSON, write_json

M = TypeVar("M", bound=BaseModel)


def has_spec(folder: Path) -> bool:
    """Whether ``folder`` holds an experiment (its servetune.json)."""
    return (folder / SPEC_JSON).is_file()


def write_spec(folder: Path, spec: BaseModel) -> None:
    """The spec as servetune.json, atomically, its schema version first."""
    write_json(folder / SPEC_JSON, {VERSION_KEY: SCHEMA_VERSION, **spec.model_dump(mode="json")})


def read_spec(folder: Path, model: type[M]) -> M:
    """servetune.json as ``model`` (absent version: 1). Raises FileNotFoundError without
    one, ValueError (pydantic's ValidationError, json's JSONDecodeError) when unreadable."""
    data = json.loads((folder / SPEC_JSON).read_text())
    if isinstance(data, dict):
        data.pop(VERSION_KEY, None)
    return model.model_validate(data)
