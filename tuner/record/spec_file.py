"""servetune.json: the experiment's spec (``tuner.spec.ExperimentSpec``) as its folder keeps
it, with its schema version. The spec is validated at the edge and knows no file; this is
where it is saved and loaded."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from tuner.record.base import SCHEMA_VERSION, VERSION_KEY
from tuner.record.files import SPEC_JSON, write_json
from tuner.spec import ExperimentSpec, SpecError, one_line


def has_spec(folder: Path) -> bool:
    """Whether ``folder`` holds an experiment (its servetune.json)."""
    return (folder / SPEC_JSON).is_file()


def save_spec(spec: ExperimentSpec) -> None:
    """The spec as ``spec.out_dir``/servetune.json, atomically, its schema version first."""
    write_json(spec.out_dir / SPEC_JSON,
               {VERSION_KEY: SCHEMA_VERSION, **spec.model_dump(mode="json")})


def load_spec(folder: Path) -> ExperimentSpec:
    """The spec in ``folder`` (a file without a version: version 1); SpecError, one line,
    when the folder holds none or an unreadable one."""
    path = folder / SPEC_JSON
    if not path.is_file():
        raise SpecError(f"{folder}: not a servetune experiment (no {SPEC_JSON})")
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            data.pop(VERSION_KEY, None)
        return ExperimentSpec.model_validate(data)
    except (ValidationError, json.JSONDecodeError) as err:
        raise SpecError(f"{path}: unreadable experiment spec: {one_line(err)}") from None
