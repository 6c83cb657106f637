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
    """A typed part of a record: immutable, unknown keys kept (``model_extra``), a numeric
    id read as the string it was (trial ids are strings: "52e91234" and "1e5" too)."""

    model_config = ConfigDict(frozen=True, extra="allow", coerce_numbers_to_str=True,
                              populate_by_name=True)

    def get(self, name: str, default: Any = None) -> Any:
        """A field or a kept key by its name on disk, as a mapping's ``get`` would give it
        (the record reads as the mapping its file holds, for code that formats it)."""
        fields = type(self).model_fields
        if name in fields and fields[name].alias in (None, name):
            return getattr(self, name)
        for field_name, info in fields.items():
            if info.alias == name:
                return getattr(self, field_name)
        return (self.model_extra or {}).get(name, default)

    def __getitem__(self, name: str) -> Any:
        if name not in self.keys():
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.keys()

    def __eq__(self, other: object) -> bool:
        """Equal to a record of its kind with the same content, or to the mapping its file
        holds (what a caller built by hand)."""
        if isinstance(other, Mapping) and not isinstance(other, BaseModel):
            return self.dump() == dict(other)
        return super().__eq__(other)

    __hash__ = BaseModel.__hash__

    def keys(self) -> list[str]:
        """The names on disk of the fields and kept keys (``**record`` works as on a dict)."""
        fields = [info.alias or name for name, info in type(self).model_fields.items()]
        return [*fields, *(self.model_extra or {})]

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
