"""The search strategies, by name: the one list that the experiment spec (``--search``,
``--stage-search``), a space file's stages (``search:``), the CLI's choices and help, the
searcher stack (``tuner.search.build``), ``servetune plan`` and the README read. A name is
spelled here once; everything else asks what a strategy does (``strategy(name)``).

Only names and properties live here (the standard library, nothing run): the searchers
themselves are tuner/search/'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The names as types (pydantic validates the spec's and a space file's against them).
SearchName = Literal["auto", "random", "grid", "optuna", "staged"]
StageSearchName = Literal["random", "grid", "optuna"]

AUTO: SearchName = "auto"
RANDOM: SearchName = "random"
GRID: SearchName = "grid"
OPTUNA: SearchName = "optuna"
STAGED: SearchName = "staged"

DEFAULT: SearchName = AUTO
DEFAULT_STAGE: StageSearchName = "random"


@dataclass(frozen=True)
class Strategy:
    """What a search does, as the rest of servetune needs to know it."""

    name: SearchName
    text: str  # what it does (the CLI's help of the default, the docs)
    in_stage: bool = False  # runs inside a stage (--stage-search, a stage's ``search:``)
    adaptive: bool = False  # later proposals depend on measured results (``plan`` says so)
    optuna: bool = False  # draws through Optuna (its study, --optuna-storage)
    exhaustive: bool = False  # every point of the space in order: the budget is its size, and
    # an invalid point is launched to be recorded
    staged: bool = False  # searches the space's stages in turn, each with its own strategy


SEARCHES: tuple[Strategy, ...] = (
    Strategy(AUTO, "the baseline, each knob's values one at a time, largest expected effect "
             "first, then a model of every pair of settings picks the rest", adaptive=True),
    Strategy(RANDOM, "points drawn at random from the space, the baseline first",
             in_stage=True),
    Strategy(GRID, "every point of the space in order, the baseline first", in_stage=True,
             exhaustive=True),
    Strategy(OPTUNA, "Optuna's TPE over the space's knobs, the baseline first", in_stage=True,
             adaptive=True, optuna=True),
    Strategy(STAGED, "the space's stages in turn, each searched by --stage-search (or its "
             "own search:) with the earlier stages' winners pinned, until nothing moves",
             adaptive=True, staged=True),
)

NAMES: tuple[str, ...] = tuple(s.name for s in SEARCHES)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in SEARCHES if s.in_stage)


def strategy(name: str) -> Strategy:
    for s in SEARCHES:
        if s.name == name:
            return s
    raise KeyError(f"unknown search {name!r}; searches: {', '.join(NAMES)}")


def default_help() -> str:
    """``--search``'s help: the default and what it does."""
    return f"{DEFAULT} (the default): {strategy(DEFAULT).text}"


def names_text(stage: bool = False) -> str:
    """The names as the README spells them: ``auto|random|grid|optuna|staged``."""
    return "|".join(STAGE_NAMES if stage else NAMES)

