"""What every record of an experiment folder shares: frozen, its keys kept as written (a key
a later release adds survives a read and a write by this one), and the schema version of the
file it was read from or will be written to. A file written before versions were recorded
has no ``schema_version``: it reads as version 1, whose format is today's less that key."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1
VERSION_KEY = "schema_version"


class Frozen(BaseModel):
    """A typed part of a record: immutable, read by attribute, unknown keys kept
    (``model_extra``), a numeric id read as the string it was (trial ids are strings:
    "52e91234" and "1e5" too). ``dump`` gives the mapping its file holds."""

    model_config = ConfigDict(frozen=True, extra="allow", coerce_numbers_to_str=True,
                              populate_by_name=True)

    def __eq__(self, other: object) -> bool:
        """Equal to a record of its kind with the same content, or to the mapping its file
        holds (what a caller built by hand)."""
        if isinstance(other, Mapping) and not isinstance(other, BaseModel):
            return self.dump() == dict(other)
        return super().__eq__(other)

    __hash__ = BaseModel.__hash__

    def dump(self) -> dict[str, Any]:
        """The record as its file holds it: the keys it was given (none filled in from
        defaults, so an old file is written back as it was, its version added)."""
        return self.model_dump(mode="python", exclude_unset=True, by_alias=True)


class Record(Frozen):
    """A whole file (or one journal line): a ``Frozen`` with its schema version."""

    schema_version: int = 1  # absent on disk: version 1

    def dump(self) -> dict[str, Any]:
        return {VERSION_KEY: self.schema_version, **super().dump()}

    def to_json_text(self, indent: int | None = None) -> str:
        return json.dumps(self.dump(), indent=indent, default=str)


def no_nan(value: Any) -> Any:
    """A table cell as a record holds it: NaN (pandas' empty cell) is None, numpy's scalars
    are Python's."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            return value
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
