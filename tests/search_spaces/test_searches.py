"""One registry of search names: the types the spec and a space file validate against, the
CLI's choices and help, and the README's list are the registry's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from search_spaces.searches import (
    DEFAULT,
    DEFAULT_STAGE,
    NAMES,
    SEARCHES,
    STAGE_NAMES,
    SearchName,
    StageSearchName,
    names_text,
    strategy,
)
from tuner import cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_types_are_the_list() -> None:
    assert get_args(SearchName) == NAMES == ("auto", "random", "grid", "optuna", "staged")
    assert get_args(StageSearchName) == STAGE_NAMES == ("random", "grid", "optuna")
    assert DEFAULT in NAMES and DEFAULT_STAGE in STAGE_NAMES
    assert [s.name for s in SEARCHES if s.staged] == ["staged"]
    assert [s.name for s in SEARCHES if s.exhaustive] == ["grid"]
    assert [s.name for s in SEARCHES if s.optuna] == ["optuna"]
    with pytest.raises(KeyError, match="searches: auto, random"):
        strategy("bayes")


def test_the_cli_offers_the_list() -> None:
    run = cli.build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    actions = {a.dest: a for a in run._actions}
    assert tuple(actions["search"].choices) == NAMES and actions["search"].default == DEFAULT
    assert tuple(actions["stage_search"].choices) == STAGE_NAMES
    assert actions["stage_search"].default == DEFAULT_STAGE
    assert strategy(DEFAULT).text in actions["search"].help


def test_the_readme_lists_the_names() -> None:
    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"`--search ([a-z]+(?:\|[a-z]+)+)`", readme)
    assert listed and all(line == names_text() for line in listed)
