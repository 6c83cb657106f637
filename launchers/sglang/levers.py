"""The catalogue held against the installed SGLang: what it lacks, and what it does not search.

SGLang's options and env registry are read in SGLang's own interpreter (the resident reader
of ``parser_server.py``, through ``preflight.ParserCheck.read_levers``). Its communication
levers are selected by name (``is_communication_lever``, the rule below) and compared with
the catalogue:

(a) catalogue entries the installed SGLang lacks: a flag that is not an option (renamed or
    removed) or is deprecated, or takes another shape (switch, one value, a list) or other
    choices; an ``SGLANG_*`` variable the registry does not declare, or whose values SGLang's
    own env type would not read;
(b) communication levers of the installed SGLang the catalogue lacks. Each must be searched
    (in the catalogue) or listed in ``NOT_SEARCHED`` with the reason (``not_searched.py``).

``check_space`` holds a space's declared knobs (open knobs) against the same answer.
``servetune knobs --check`` prints ``check_catalogue(python).lines()``; the contract test
fails on (a), on (b) outside NOT_SEARCHED, and on NOT_SEARCHED names this SGLang lacks.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launchers.sglang import preflight
from launchers.sglang.not_searched import NOT_SEARCHED
from search_spaces.knobs import CATALOGUE, Knob, KnobKind, Source
from search_spaces.space import SearchSpace

__all__ = ["NOT_SEARCHED", "Lever", "LeverReport", "check_catalogue", "check_space", "compare",
           "is_communication_lever"]

logger = logging.getLogger(__name__)

# The selection rule: a lever is about communication when its name says it is about
# allreduce, all-gather, reduce-scatter, NCCL, symmetric memory, MSCCL++, PCIe, NVLink
# multicast (NVLS/MNNVL), custom allreduce ("AR" as a word of an env name), communication
# or collectives; or when it is a CUDA-graph batch size (the shapes a collective is captured
# at) or the speculative shape (the verify batch). Deprecated and hidden flags are left out.
_FLAG_WORDS = re.compile(r"all-?reduce|all-?gather|reduce-scatter|nccl|symm-mem|mscclpp|pcie"
                         r"|nvls|mnnvl|communication|(^--|-)comm(-|$)")
_FLAG_SHAPES = re.compile(r"^--cuda-graph-(max-)?bs-(decode|prefill)$"
                          r"|^--speculative-(num-steps|eagle-topk|num-draft-tokens|[a-z]+-block-size)$")
_ENV_WORDS = re.compile(r"ALL_?REDUCE|ALL_?GATHER|REDUCE_?SCATTER|NCCL|SYMM_MEM|MSCCL|PCIE"
                        r"|NVLS|MNNVL|(^|_)AR(_|$)|(^|_)COMM(_|$)|COLLECTIVE")


def is_communication_lever(name: str) -> bool:
    """The selection rule, for a flag (``--x``) or an env variable name."""
    if name.startswith("--"):
        return bool(_FLAG_WORDS.search(name) or _FLAG_SHAPES.match(name))
    return bool(_ENV_WORDS.search(name))


@dataclass(frozen=True)
class Lever:
    """One setting of the installed SGLang."""

    name: str
    source: Source
    kind: str  # "switch", "int", "str", "int list", ... or the env type (EnvBool, ...)
    default: Any
    help: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeverReport:
    sglang_version: str | None
    missing: tuple[tuple[str, str], ...]  # (a): (knob, what the installed SGLang says)
    uncatalogued: tuple[Lever, ...]  # (b): communication levers the catalogue lacks
    stale: tuple[str, ...] = ()  # NOT_SEARCHED names the installed SGLang lacks
    not_sglangs: tuple[str, ...] = ()  # catalogue knobs SGLang does not own (NCCL, ...)
    not_searched: Mapping[str, str] = field(default_factory=lambda: dict(NOT_SEARCHED))

    @property
    def unexplained(self) -> tuple[Lever, ...]:
        """(b) without a reason in NOT_SEARCHED."""
        return tuple(lev for lev in self.uncatalogued if lev.name not in self.not_searched)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexplained or self.stale)

    def lines(self) -> list[str]:
        version = self.sglang_version or "(unknown version)"
        out = [f"SGLang {version}: the catalogue against its parser and env registry"]
        out.append(f"(a) catalogue entries SGLang {version} lacks: "
                   + (str(len(self.missing)) if self.missing else "none"))
        out += [f"    {name}: {why}" for name, why in self.missing]
        searched_elsewhere = len(self.uncatalogued) - len(self.unexplained)
        out.append(f"(b) communication levers of SGLang {version} the catalogue lacks: "
                   f"{len(self.uncatalogued)} ({searched_elsewhere} not searched, with a reason)")
        for lever in self.uncatalogued:
            reason = self.not_searched.get(lever.name)
            state = f"not searched: {reason}" if reason else "NOT IN THE CATALOGUE"
            out.append(f"    {lever.name} [{lever.source.value}, {lever.kind}, "
                       f"default {lever.default!r}]: {state}")
        if self.stale:
            out.append(f"NOT_SEARCHED names SGLang {version} lacks: {len(self.stale)}")
            out += [f"    {name}" for name in self.stale]
        if self.not_sglangs:
            out.append(f"not SGLang's, not checked here: {', '.join(self.not_sglangs)}")
        return out


# ---------------------------------------------------------------- reading SGLang's answer


def _option_kind(option: Mapping[str, Any]) -> str:
    nargs = option.get("nargs")
    if nargs == 0:
        return "switch"
    kind = option.get("type") or "str"
    return f"{kind} list" if nargs in ("+", "*") else str(kind)


def flag_levers(options: Sequence[Mapping[str, Any]]) -> list[Lever]:
    """Every visible, current option (one Lever per option, aliases kept)."""
    out = []
    for option in options:
        if option.get("deprecated") or option.get("hidden"):
            continue
        names = [n for n in option["names"] if n.startswith("--")]
        if names:
            out.append(Lever(names[0], Source.SGLANG_FLAG, _option_kind(option),
                             option.get("default"), str(option.get("help", "")),
                             tuple(names[1:])))
    return out


def env_levers(env: Sequence[Mapping[str, Any]]) -> list[Lever]:
    return [Lever(str(e["name"]), Source.SGLANG_ENV, str(e["type"]), e.get("default"))
            for e in env]


# ---------------------------------------------------------------- (a) per catalogue knob


def _closest(name: str, names: Sequence[str]) -> str:
    found = difflib.get_close_matches(name, names, n=1)
    return f" (closest: {found[0]})" if found else ""


def _flag_problem(knob: Knob, options: Mapping[str, Mapping[str, Any]]) -> str | None:
    option = options.get(knob.name)
    if option is None:
        return "not an option (renamed or removed)" + _closest(knob.name, list(options))
    if option.get("deprecated"):
        return f"deprecated: {option.get('help') or 'its action says so'}"
    kind = _option_kind(option)
    if knob.is_switch != (kind == "switch"):
        return f"SGLang's option is a {kind}; the knob renders " + (
            "a switch" if knob.is_switch else "a value")
    if knob.list_valued != kind.endswith(" list"):
        return f"SGLang's option takes {kind}; the knob renders " + (
            "a list" if knob.list_valued else "one value")
    choices = option.get("choices")
    if choices is not None:
        outside = [v for v in knob.choices if v is not None and str(v) not in map(str, choices)]
        if outside:
            return f"SGLang's choices {choices} lack {outside}"
    return None


_ENV_VALUE_TYPES = {"EnvBool": (0, 1), "EnvInt": int, "EnvStr": str}


def _env_problem(knob: Knob, env_types: Mapping[str, str],
                 readings: Mapping[tuple[str, str], preflight.EnvResult]) -> str | None:
    env_type = env_types.get(knob.name)
    if env_type is None:
        return ("not in SGLang's env registry (renamed or removed)"
                + _closest(knob.name, list(env_types)))
    for value in knob.choices:
        text = knob.render_env(value)
        reading = readings.get((knob.name, text or ""))
        if text is not None and reading is not None and reading.ok is False:
            return f"SGLang reads it as {env_type} and rejects {text!r}: {reading.error}"
    return None


def compare(answer: Mapping[str, Any],
            readings: Mapping[tuple[str, str], preflight.EnvResult] | None = None,
            catalogue: Mapping[str, Knob] | None = None) -> LeverReport:
    """The report from SGLang's answer (``ParserCheck.read_levers``) and its readings of the
    catalogue's env values; pure."""
    knobs = CATALOGUE if catalogue is None else catalogue
    flags = flag_levers(answer.get("options") or [])
    options = {n: o for o in answer.get("options") or [] for n in o["names"]}
    env = env_levers(answer.get("env") or [])
    env_types = {lev.name: lev.kind for lev in env}
    missing: list[tuple[str, str]] = []
    not_sglangs = []
    for knob in knobs.values():
        if knob.kind is KnobKind.COMPOSITE:
            continue  # its primitives are catalogue knobs, checked on their own
        if knob.source is Source.SGLANG_FLAG:
            problem = _flag_problem(knob, options)
        elif knob.source is Source.SGLANG_ENV:
            if answer.get("env") is None:
                problem = f"SGLang's env registry unreadable: {answer.get('env_error')}"
            else:
                problem = _env_problem(knob, env_types, readings or {})
        else:
            not_sglangs.append(knob.name)
            continue
        if problem:
            missing.append((knob.name, problem))
    uncatalogued = [lev for lev in [*flags, *env]
                    if any(is_communication_lever(n) for n in (lev.name, *lev.aliases))
                    and not {lev.name, *lev.aliases} & set(knobs)]
    present = {*options, *env_types}
    stale = sorted(name for name in NOT_SEARCHED if name not in present)
    return LeverReport(answer.get("version"), tuple(missing), tuple(uncatalogued),
                       tuple(stale), tuple(not_sglangs))


def catalogue_env_values(catalogue: Mapping[str, Knob] | None = None) -> list[tuple[str, str]]:
    """Every (name, text) the catalogue's SGLang env knobs render."""
    knobs = CATALOGUE if catalogue is None else catalogue
    return [(k.name, text) for k in knobs.values() if k.source is Source.SGLANG_ENV
            for v in k.choices if (text := k.render_env(v)) is not None]


def check_catalogue(python: str | None = None, experiment: str | None = None,
                    checker: preflight.ParserCheck | None = None) -> LeverReport:
    """The catalogue against the SGLang that ``python`` runs (default: this interpreter).
    Raises preflight.SGLangUnavailable when SGLang cannot be read there."""
    check = checker or preflight.shared()
    answer = check.read_levers(python, experiment)
    values = catalogue_env_values()
    readings = dict(zip(values, check.check_env(values, python, experiment=experiment),
                        strict=True))
    return compare(answer, readings)


def check_space(space: SearchSpace, python: str | None = None, experiment: str | None = None,
                checker: preflight.ParserCheck | None = None) -> None:
    """Raise ``search_spaces.space.UnknownName`` (a SpaceError: one line naming the closest
    real name) for a knob the space declares that the installed SGLang lacks: an
    ``SGLANG_*`` variable outside its env registry, or a flag outside its parser. A space
    that declares nothing starts nothing; an SGLang that cannot be read is logged and left
    unchecked, as the preflight does."""
    if not space.open_knobs:
        return
    try:
        answer = (checker or preflight.shared()).read_levers(python, experiment)
    except preflight.SGLangUnavailable as why:
        logger.warning("declared knobs not checked: %s", why)
        return
    env = answer.get("env")
    env_names = {str(e["name"]) for e in env} if env is not None else None
    options = {str(n) for o in answer.get("options") or [] for n in o["names"]}
    space.check_installed(env_names, options, answer.get("version"))
