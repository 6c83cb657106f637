"""Contract: every command servetune renders parses with the installed SGLang's own parser.

Needs SGLang's parser importable on this interpreter (CPU is enough):
    pip install -r requirements/sglang-parser.txt && pip install --no-deps sglang==0.5.23
Skipped, with the reason, where it is not.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from launchers.base import knob_argv
from launchers.sglang.preflight import ParserCheck, PreflightResult, python_for, shared
from search_spaces.knobs import CATALOGUE, Knob, KnobKind
from search_spaces.space import SearchSpace, load_preset, preset_names
from tests.requirements import unavailable
from tests.sglang_parser import CONTRACT, Rejected
from tests.sglang_parser import sglang_parser as build_parser

pytestmark = CONTRACT

# Representative base arguments, as the sglang workload renders them for a speculative run.
BASE = ["--model-path", "/models/x", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/d", "--tp-size", "8",
        "--host", "127.0.0.1", "--port", "30000", "--enable-metrics"]
GRID_LIMIT = 1000  # presets up to this many points are checked whole
SAMPLES = 50  # seeded random points for larger presets
FLAG_KNOBS = [name for name, knob in CATALOGUE.items() if knob.kind is KnobKind.FLAG]


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    return build_parser()


RENAMED = [*BASE, "--cuda-graph-max-bs", "8"]  # the pre-0.5.23 spelling
UNKNOWN = [*BASE, "--enable-flashinfer-allreduce-fusion-turbo"]
DEPRECATED = [*BASE, "--disable-cuda-graph"]


@pytest.fixture(scope="module")
def checker(sglang_parser: argparse.ArgumentParser) -> ParserCheck:
    """The preflight itself, warmed with every command of this module in one subprocess;
    the tests' own calls then come from its memory cache."""
    check = shared()  # the worker's one reader: each fresh one is ~8 s of SGLang's import
    argvs = [argv for name in preset_names() for argv in _preset_argvs(name)]
    argvs += [BASE + CATALOGUE[name].render_argv(v)
              for name in FLAG_KNOBS for v in CATALOGUE[name].choices]
    assert all(r.ok is not None for r in check.check_many([*argvs, RENAMED, UNKNOWN, DEPRECATED]))
    return check


def _points(space: SearchSpace) -> Iterator[dict[str, Any]]:
    yield space.baseline()
    if space.size <= GRID_LIMIT:
        yield from space.grid()
    else:
        rng = random.Random(f"contract:{space.name}")
        for _ in range(SAMPLES):
            yield space.sample(rng)


def _preset_argvs(name: str) -> list[list[str]]:
    space = load_preset(name)
    argvs = {tuple(BASE + knob_argv(point)): None
             for point in _points(space) if not space.validate(point)}
    return [list(argv) for argv in argvs]


def _failures(argvs: list[list[str]], results: list[PreflightResult]) -> list[str]:
    return [f"{' '.join(argv)}\n    -> {r.error or '; '.join(r.warnings)}"
            for argv, r in zip(argvs, results, strict=True) if not r.ok or r.warnings]


# ---------------------------------------------------------------- (a) shipped presets


@pytest.fixture(scope="module")
def preset_results(checker: ParserCheck) -> dict[str, tuple[list[list[str]], list[PreflightResult]]]:
    """Every preset's argvs with SGLang's verdicts."""
    argvs = {name: _preset_argvs(name) for name in preset_names()}
    return {name: (group, checker.check_many(group)) for name, group in argvs.items()}


def test_there_are_presets() -> None:
    assert preset_names()


@pytest.mark.parametrize("preset", preset_names())
def test_preset_commands_parse(
        preset: str,
        preset_results: dict[str, tuple[list[list[str]], list[PreflightResult]]]) -> None:
    argvs, results = preset_results[preset]
    assert argvs, f"preset {preset} rendered no valid point"
    assert all(r.ok is not None for r in results), "preflight did not run"
    assert results[0].sglang_version == version("sglang")
    failures = _failures(argvs, results)
    assert not failures, (f"preset {preset}: SGLang {results[0].sglang_version} rejects or "
                          f"warns about {len(failures)} of {len(argvs)} commands:\n"
                          + "\n".join(failures[:10]))


# ---------------------------------------------------------------- (b) renamed flags


def test_renamed_flag_is_caught_with_sglangs_own_message(
        checker: ParserCheck, sglang_parser: argparse.ArgumentParser) -> None:
    result = checker.check_argv(RENAMED)
    assert result.ok is False
    assert result.error.startswith("ambiguous option: --cuda-graph-max-bs could match")
    assert "--cuda-graph-max-bs-decode" in result.error
    with pytest.raises(Rejected) as direct:
        sglang_parser.parse_args(RENAMED)
    assert result.error == str(direct.value)  # word for word what SGLang says


def test_unknown_flag_is_caught(checker: ParserCheck) -> None:
    result = checker.check_argv(UNKNOWN)
    assert result.ok is False
    assert result.error == "unrecognized arguments: --enable-flashinfer-allreduce-fusion-turbo"


def test_deprecated_flag_parses_with_a_warning(checker: ParserCheck) -> None:
    result = checker.check_argv(DEPRECATED)
    assert result.ok is True
    assert any("deprecated" in w for w in result.warnings), result.warnings


def test_console_script_interpreter_runs_the_preflight(checker: ParserCheck) -> None:
    script = Path(sys.executable).parent / "sglang"
    if not script.exists():
        unavailable(f"no sglang console script beside {sys.executable}")
    python = python_for([str(script), "serve"])
    assert python is not None
    assert checker.check_argv(BASE, python=python).ok is True


# ---------------------------------------------------------------- (c) every FLAG knob


def _option(parser: argparse.ArgumentParser, knob: Knob) -> argparse.Action:
    action = parser._option_string_actions.get(knob.name)
    assert action is not None, (
        f"knob {knob.name} is not an option of SGLang {version('sglang')} "
        "(a prefix of a longer option would still parse, but means another flag)")
    help_text = (action.help or "").lower()
    assert "deprecated" not in type(action).__name__.lower() and "deprecated" not in help_text, (
        f"knob {knob.name} is deprecated in SGLang {version('sglang')}: {action.help}")
    return action


@pytest.mark.parametrize("name", FLAG_KNOBS)
def test_flag_knob_exists_with_a_compatible_type(
        name: str, sglang_parser: argparse.ArgumentParser) -> None:
    knob = CATALOGUE[name]
    action = _option(sglang_parser, knob)
    parsed_base = sglang_parser.parse_args(BASE)
    if knob.is_switch:
        assert action.nargs == 0, f"{name} takes a value in SGLang; the knob renders a switch"
        assert getattr(parsed_base, action.dest) in (False, None)
        assert getattr(sglang_parser.parse_args([*BASE, name]), action.dest) is True
        return
    if knob.list_valued:
        assert action.nargs in ("+", "*"), f"{name}: SGLang expects nargs={action.nargs!r}"
    else:
        assert action.nargs is None, f"{name}: SGLang expects nargs={action.nargs!r}"
    for value in (v for v in knob.choices if v is not None):
        parsed = sglang_parser.parse_args(BASE + knob.render_argv(value))
        got = getattr(parsed, action.dest)
        want = [int(w) for w in str(value).split(",")] if knob.list_valued else value
        assert got == want and type(got) is type(want), (
            f"{name} {value!r}: SGLang parses it as {got!r} ({type(got).__name__})")
    if action.choices is not None:
        outside = [v for v in knob.choices if v not in action.choices]
        assert not outside, f"{name}: SGLang's choices {list(action.choices)} lack {outside}"


@pytest.mark.parametrize("name", FLAG_KNOBS)
def test_flag_knob_values_pass_the_preflight(name: str, checker: ParserCheck) -> None:
    knob = CATALOGUE[name]
    argvs = [BASE + knob.render_argv(v) for v in knob.choices if knob.render_argv(v)]
    assert argvs, f"{name} has no value that renders a flag"
    failures = _failures(argvs, checker.check_many(argvs))
    assert not failures, "\n".join(failures)
