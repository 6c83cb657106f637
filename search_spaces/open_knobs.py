"""Open knobs: settings a space declares that the catalogue lacks.

A space YAML gives a catalogue knob its values as a list; a knob the catalogue lacks is
declared with a mapping that names its kind (``env`` or ``flag``) with its type, and its
values::

    knobs:
      SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: [0, 1]           # a catalogue knob
      SGLANG_SYMM_MEM_PREALLOC_GB_SIZE: {env: int, values: [4, 8]}
      --enable-two-batch-overlap: {flag: bool, values: [true]}
      --cuda-graph-bs-prefill: {flag: str, values: ["1 2 4", "1 2 4 8"]}

Types: ``bool`` (env: 0/1 or true/false, rendered 1/0; flag: a switch, true/false), ``int``,
``str`` (text without line breaks; a flag's text is split on whitespace into argv words, as
a shell would, so ``"1 2 4"`` gives a flag that takes several values). Each value is checked
against the type here; whether the installed SGLang
knows the name and reads the value is checked against SGLang itself, which this package
does not start: ``check_names`` takes SGLang's env names and options from the caller
(``launchers/sglang/levers.py``, ``check_space``), and the sglang workload's preflight reads
every ``SGLANG_*`` value with SGLang's own env types before a launch. A declared knob is
pinned, staged and searched like any other; it renders from its name and value alone.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from search_spaces.domains import Checker, Value, boolean
from search_spaces.knob import Group, Knob, KnobKind, Source

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
FLAG_NAME = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
KINDS = {"env": KnobKind.ENV, "flag": KnobKind.FLAG}
_ENV_SOURCES = (("SGLANG_", Source.SGLANG_ENV), ("NCCL_", Source.NCCL),
                ("TORCH_", Source.TORCH), ("NVSHMEM_", Source.NVSHMEM))


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message names the problem (no source/key)."""


def _env_bool(value: Value) -> str | None:
    return None if value in (0, 1) else "must be 0, 1, true or false"


def _integer(value: Value) -> str | None:
    return None if isinstance(value, int) and not isinstance(value, bool) \
        else f"must be an integer, got {value!r}"


def _text(value: Value) -> str | None:
    if isinstance(value, str) and value and not any(c in value for c in "\n\r\x00"):
        return None
    return f"must be text without line breaks, got {value!r}"


_TYPES: dict[tuple[KnobKind, str], Checker] = {
    (KnobKind.ENV, "bool"): _env_bool, (KnobKind.FLAG, "bool"): boolean,
    (KnobKind.ENV, "int"): _integer, (KnobKind.FLAG, "int"): _integer,
    (KnobKind.ENV, "str"): _text, (KnobKind.FLAG, "str"): _text,
}


def _source(kind: KnobKind, name: str) -> Source:
    if kind is KnobKind.FLAG:
        return Source.SGLANG_FLAG
    return next((s for prefix, s in _ENV_SOURCES if name.startswith(prefix)), Source.ENV)


def declare(name: str, spec: Mapping[str, Any], where: str) -> tuple[Knob, list[Any]]:
    """The knob a ``{env|flag: TYPE, values: [...]}`` mapping declares, and its raw values."""
    kinds = [k for k in KINDS if k in spec]
    unknown = sorted(set(spec) - {*KINDS, "values"})
    if len(kinds) != 1 or unknown:
        raise DeclarationError(
            "declare a knob the catalogue lacks as {env: TYPE, values: [...]} or "
            "{flag: TYPE, values: [...]}" + (f"; unknown keys: {', '.join(unknown)}" if unknown else ""))
    kind = KINDS[kinds[0]]
    pattern = FLAG_NAME if kind is KnobKind.FLAG else ENV_NAME
    if not pattern.match(name):
        raise DeclarationError(f"{name!r} is not a{'' if kind is KnobKind.ENV else ' flag'} "
                               f"name ({'--lower-case-words' if kind is KnobKind.FLAG else 'UPPER_CASE'})")
    type_name = spec[kinds[0]]
    check = _TYPES.get((kind, str(type_name)))
    if check is None:
        allowed = sorted(t for k, t in _TYPES if k is kind)
        raise DeclarationError(f"{kinds[0]} type {type_name!r}: one of {', '.join(allowed)}")
    values = spec.get("values")
    if not isinstance(values, list) or not values:
        raise DeclarationError("values: a non-empty list")
    knob = Knob(name, kind, Group.OPEN, f"declared in {where}", (), check,
                source=_source(kind, name), default="the server's or library's own",
                declared=True)
    return knob, values


# ---------------------------------------------------------------- against the installed SGLang


def closest(name: str, candidates: Collection[str]) -> str | None:
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def check_names(open_knobs: Mapping[str, Knob], source: str, env_names: Collection[str] | None,
                options: Collection[str] | None, version: str | None,
                error: Callable[[str], Exception]) -> None:
    """Raise ``error(one line)`` for the first declared ``SGLANG_*`` variable the installed
    SGLang's env registry lacks, or declared flag its parser lacks, naming the closest real
    name. ``None`` for either collection: not known, not checked."""
    sglang = f"SGLang {version}" if version else "the installed SGLang"
    for name, knob in open_knobs.items():
        if knob.kind is KnobKind.ENV and name.startswith("SGLANG_") and env_names is not None \
                and name not in env_names:
            near = closest(name, env_names)
            raise error(f"{source}: knobs.{name}: {sglang} has no environment variable {name}"
                        + (f"; did you mean {near}?" if near else ""))
        if knob.kind is KnobKind.FLAG and options is not None and name not in options:
            near = closest(name, options)
            raise error(f"{source}: knobs.{name}: {sglang} has no option {name}"
                        + (f"; did you mean {near}?" if near else ""))
