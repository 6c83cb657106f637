"""SearchSpace: knobs with their values, pinned knobs, optional stages, and the baseline point.

Spaces come from YAML (a shipped preset or the user's file). Loading validates everything
and names the file, the key and the reason on error. Nothing here starts a process. A space
may declare knobs the catalogue lacks (``open_knobs.py`` has the YAML shape); whether the
installed SGLang knows them is checked by ``SearchSpace.check_installed`` with names the
caller read from SGLang.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from search_spaces import knobs, open_knobs
from search_spaces.constraints import SHAPE, partial_shape
from search_spaces.knobs import Knob, Value
from search_spaces.searches import StageSearchName

PRESET_PACKAGE = "search_spaces.presets"
DEFAULT_WORDS = ("default", "unset")


class SpaceError(ValueError):
    """A space that cannot be used; the message names the source, the key and the reason."""


class UnknownName(SpaceError):
    """A declared knob the installed SGLang does not know (one line, naming the closest)."""


class _StageFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    knobs: list[str]
    samples: int | None = None
    search: StageSearchName | None = None


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    knobs: dict[str, list[Any] | dict[str, Any] | None]
    pins: dict[str, Any] = {}
    stages: list[_StageFile] = []


@dataclass(frozen=True)
class Stage:
    name: str
    knobs: tuple[str, ...]
    samples: int | None = None
    search: str | None = None


@dataclass(frozen=True)
class Allowed:
    """Only these combinations of ``knobs`` may run; ``why`` says why the others may not
    (e.g. the speculative shapes a workload has a measurement for)."""

    knobs: tuple[str, ...]
    points: frozenset[tuple[Value, ...]]
    why: str

    def check(self, config: Mapping[str, Value]) -> str | None:
        point = tuple(config.get(k) for k in self.knobs)
        if point in self.points:
            return None
        given = ", ".join(f"{k}={'default' if v is None else v}"
                          for k, v in zip(self.knobs, point, strict=True))
        return f"{given}: {self.why}"


@dataclass(frozen=True)
class SearchSpace:
    name: str
    domains: Mapping[str, tuple[Value, ...]]  # searched knobs; each domain holds the unset value
    pins: Mapping[str, Value] = field(default_factory=dict)
    stages: tuple[Stage, ...] = ()
    description: str = ""
    source: str = ""
    open_knobs: Mapping[str, Knob] = field(default_factory=dict)  # declared by the space
    allowed: tuple[Allowed, ...] = ()  # combinations a workload restricts the space to
    base: Mapping[str, Value] = field(default_factory=dict)  # the user's own settings

    # ------------------------------------------------------------ knobs
    def knob(self, name: str) -> Knob:
        """A knob of this space: the catalogue's, or one the space declares."""
        return self.open_knobs.get(name) or knobs.CATALOGUE[name]

    def check_installed(self, env_names: Collection[str] | None, options: Collection[str] | None,
                        version: str | None = None) -> None:
        """Raise UnknownName (one line) for a declared ``SGLANG_*`` variable or flag that the
        installed SGLang lacks; ``env_names``/``options`` come from SGLang itself."""
        open_knobs.check_names(self.open_knobs, self.source or self.name, env_names, options,
                               version, UnknownName)

    # ------------------------------------------------------------ points
    def baseline(self) -> dict[str, Value]:
        """The user's settings: every searched knob as the user runs it (``base``; unset where
        the user sets nothing), pins applied."""
        point: dict[str, Value] = {name: self.base.get(name, self.knob(name).unset)
                                   for name in self.domains}
        point.update(self.pins)
        return point

    def with_baseline(self, values: Mapping[str, Value]) -> SearchSpace:
        """The baseline set to the user's own values of searched knobs: each comes first in
        its knob's domain (added if the space lacks it), and the unset value, SGLang's or
        NCCL's own default, stays in the domain as one more point to try. Values of knobs
        outside the space are ignored (they are not the search's to change)."""
        base = {}
        domains = dict(self.domains)
        for name, value in values.items():
            if name not in domains:
                continue
            reason = self.knob(name).validate(value)
            if reason:
                raise SpaceError(f"your setting of {name}: {reason}")
            base[name] = value
            domains[name] = (value, *(v for v in domains[name] if v != value))
        return replace(self, domains=domains, base={**self.base, **base})

    def complete(self, config: Mapping[str, Value]) -> dict[str, Value]:
        """A full configuration: the baseline updated with ``config``."""
        point = self.baseline()
        point.update(config)
        return point

    def validate(self, config: Mapping[str, Value]) -> list[str]:
        reasons = knobs.check_config(config, self.open_knobs)
        for name, value in self.pins.items():
            if config.get(name, value) != value:
                reasons.append(f"{name} is pinned to {value!r}, got {config[name]!r}")
        reasons += [r for a in self.allowed if (r := a.check(config))]
        return reasons

    def warnings(self, config: Mapping[str, Value]) -> list[str]:
        return knobs.config_warnings(config, self.open_knobs)

    # ------------------------------------------------------------ enumeration
    @property
    def size(self) -> int:
        return math.prod(len(values) for values in self.domains.values()) if self.domains else 1

    def grid(self) -> Iterator[dict[str, Value]]:
        """Every point, baseline first (it is the first value of each domain), except partial
        speculative shapes: no server could start them (constraints.partial_shape)."""
        names = list(self.domains)
        for values in itertools.product(*(self.domains[n] for n in names)):
            point = self.complete(dict(zip(names, values, strict=True)))
            if not partial_shape(point):
                yield point

    def sample(self, rng: random.Random) -> dict[str, Value]:
        """A random point, never a partial speculative shape (drawn again; at worst its
        topk and draft tokens are left to SGLang with the steps)."""
        for _ in range(100):
            point = self.complete({n: rng.choice(vals) for n, vals in self.domains.items()})
            if not partial_shape(point):
                return point
        return {**point, **{n: None for n in SHAPE if n in self.domains}}

    def valid_size(self, limit: int = 200_000) -> int | None:
        """How many points pass validation (None when the space is too large to count)."""
        if self.size > limit:
            return None
        return sum(1 for point in self.grid() if not self.validate(point))

    # ------------------------------------------------------------ derived spaces
    def with_pins(self, pins: Mapping[str, Value]) -> SearchSpace:
        """Pin knobs (removing them from the search). Pins are validated like values."""
        resolved = {}
        for raw, value in pins.items():
            name = _knob_name(raw, f"pin {raw}", self.open_knobs)
            reason = self.knob(name).validate(value)
            if reason:
                raise SpaceError(f"pin {name}: {reason}")
            resolved[name] = value
        domains = {n: v for n, v in self.domains.items() if n not in resolved}
        stages = tuple(replace(s, knobs=tuple(k for k in s.knobs if k not in resolved))
                       for s in self.stages)
        return replace(self, domains=domains, pins={**self.pins, **resolved}, stages=stages)

    def restricted_to(self, names: set[str] | frozenset[str]) -> tuple[SearchSpace, list[str]]:
        """Keep only ``names`` searched; the rest leave the space. Returns the dropped names."""
        dropped = [n for n in self.domains if n not in names]
        domains = {n: v for n, v in self.domains.items() if n in names}
        dropped_pins = [n for n in self.pins if n not in names]
        pins = {n: v for n, v in self.pins.items() if n in names}
        stages = tuple(replace(s, knobs=tuple(k for k in s.knobs if k in names))
                       for s in self.stages)
        return replace(self, domains=domains, pins=pins, stages=stages), dropped + dropped_pins

    def stage_space(self, stage: Stage, winners: Mapping[str, Value]) -> SearchSpace:
        """The sub-space of one stage with earlier stages' winners pinned."""
        domains = {n: v for n, v in self.domains.items() if n in stage.knobs}
        others = {n: v for n, v in winners.items() if n not in stage.knobs}
        return replace(self, name=f"{self.name}:{stage.name}", domains=domains,
                       pins={**self.pins, **others}, stages=())

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "size": self.size,
            "knobs": {n: list(v) for n, v in self.domains.items()},
            "pins": dict(self.pins),
            "stages": [s.__dict__ for s in self.stages],
            "open_knobs": {n: {"kind": k.kind.value, "source": k.source.value}
                           for n, k in self.open_knobs.items()},
        }


# ---------------------------------------------------------------- loading


def _knob_name(raw: str, where: str, declared: Mapping[str, Knob] | None = None) -> str:
    if declared and raw in declared:
        return raw
    try:
        return knobs.canonical_name(raw)
    except knobs.UnknownKnob as err:
        raise SpaceError(f"{where}: {err}") from None


def _coerce(value: Any) -> Value:
    if isinstance(value, str) and value.strip().lower() in DEFAULT_WORDS:
        return None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                       for v in value):
        return ",".join(str(v) for v in value)  # a list value, e.g. [1, 2, 4] -> "1,2,4"
    raise TypeError(f"values must be strings, integers, booleans or lists of integers, "
                    f"got {value!r}")


def _domain(knob: Knob, values: list[Any] | None, where: str) -> tuple[Value, ...]:
    raw = list(knob.choices) if values is None else values
    out: list[Value] = [knob.unset]
    for item in raw:
        try:
            value = _coerce(item)
        except TypeError as err:
            raise SpaceError(f"{where}: {err}") from None
        reason = knob.validate(value)
        if reason:
            raise SpaceError(f"{where}: {reason}")
        if (type(value), value) not in {(type(o), o) for o in out}:
            out.append(value)
    if len(out) < 2:
        raise SpaceError(f"{where}: no values to try besides the default")
    return tuple(out)


def _declare(name: str, spec: dict[str, Any], where: str) -> tuple[Knob, list[Any]]:
    if name in knobs.CATALOGUE or name.upper() in knobs.CATALOGUE or f"--{name}" in knobs.CATALOGUE:
        raise SpaceError(f"{where}: {name} is in the catalogue: give its values as a list")
    try:
        return open_knobs.declare(name, spec, where.split(": ")[0])
    except open_knobs.DeclarationError as err:
        raise SpaceError(f"{where}: {err}") from None


def from_mapping(data: Any, source: str) -> SearchSpace:
    """Build a space from parsed YAML; every error names ``source`` and the key."""
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: expected a mapping with 'name' and 'knobs'")
    try:
        parsed = _SpaceFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise SpaceError(f"{source}: {key}: {first['msg']}") from None
    domains: dict[str, tuple[Value, ...]] = {}
    declared: dict[str, Knob] = {}
    for raw, values in parsed.knobs.items():
        where = f"{source}: knobs.{raw}"
        if isinstance(values, dict):
            knob, listed = _declare(raw, values, where)
            declared[raw] = knob
            domains[raw] = _domain(knob, listed, where)
            continue
        name = _knob_name(raw, where)
        domains[name] = _domain(knobs.CATALOGUE[name], values, where)
    pins: dict[str, Value] = {}
    for raw, value in parsed.pins.items():
        name = _knob_name(raw, f"{source}: pins.{raw}", declared)
        try:
            pins[name] = _coerce(value)
        except TypeError as err:
            raise SpaceError(f"{source}: pins.{raw}: {err}") from None
        reason = (declared.get(name) or knobs.CATALOGUE[name]).validate(pins[name])
        if reason:
            raise SpaceError(f"{source}: pins.{raw}: {reason}")
        domains.pop(name, None)
    if not domains:
        raise SpaceError(f"{source}: the space is empty: no knob left to search")
    stages = []
    for i, stage in enumerate(parsed.stages):
        names = tuple(_knob_name(k, f"{source}: stages.{i}.knobs", declared)
                      for k in stage.knobs)
        missing = [n for n in names if n not in domains and n not in pins]
        if missing:
            raise SpaceError(f"{source}: stages.{i}.knobs: not in the space: {', '.join(missing)}")
        stages.append(Stage(stage.name, tuple(n for n in names if n in domains),
                            stage.samples, stage.search))
    space = SearchSpace(parsed.name, domains, pins, tuple(stages), parsed.description, source,
                        declared)
    baseline_problems = space.validate(space.baseline())
    if baseline_problems:
        raise SpaceError(f"{source}: the baseline itself is invalid: {baseline_problems[0]}")
    return space


def load_file(path: Path) -> SearchSpace:
    try:
        text = path.read_text()
    except OSError as err:
        raise SpaceError(f"{path}: cannot read: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpaceError(f"{path}:{where}: malformed YAML: {problem}") from None
    return from_mapping(data, str(path))


def preset_names() -> list[str]:
    folder = resources.files(PRESET_PACKAGE)
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_preset(name: str) -> SearchSpace:
    if name not in preset_names():
        raise SpaceError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}")
    text = resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text()
    return from_mapping(yaml.safe_load(text), f"preset {name}")


def load(name_or_path: str) -> SearchSpace:
    """A preset name, or a path to a YAML file."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        if not path.exists():
            raise SpaceError(f"{path}: no such file")
        return load_file(path)
    return load_preset(name_or_path)
