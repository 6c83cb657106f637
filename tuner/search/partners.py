"""Partners completed, not refused: a lever SGLang refuses alone (``--speculative-num-steps``
without topk on 0.5.16, draft tokens or topk without steps anywhere) is proposed with its
partners set as the workload resolved them for the baseline. Which partners: the knobs the
refusal names, then the rest of the changed knobs' catalogue groups, fewest first; the
workload's own checks (and the space's rules) say when the configuration is complete. No Ray.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config

MAX_ASKS = 8  # the workload's checks asked per refused proposal, at most (each may be costly)


def knob_values(resolved: Mapping[str, Any], names: Iterable[str]) -> dict[str, Value]:
    """A server's resolved arguments (SGLang's ServerArgs fields, ``resolved.json``) as values
    of the flag knobs among ``names``: ``--speculative-num-steps`` reads
    ``speculative_num_steps``; a field it left unset, or not a plain value, is left out."""
    out: dict[str, Value] = {}
    for name in names:
        if not name.startswith("--"):
            continue
        value = resolved.get(name[2:].replace("-", "_"))
        if isinstance(value, float):  # a knob's value is text where it is not an integer
            out[name] = str(value)
        elif isinstance(value, (bool, int, str)):
            out[name] = value
    return out


def _group(name: str) -> object:
    knob = knobs.CATALOGUE.get(name)
    return None if knob is None else knob.group


def candidates(space: SearchSpace, config: Mapping[str, Value], reasons: Iterable[str],
               resolved: Mapping[str, Value]) -> list[str]:
    """The knobs that may complete ``config``: unset in it, given a value by the baseline's
    resolution; those the refusal names first, then those of a changed knob's group."""
    baseline = space.baseline()
    unset = [n for n in space.domains if config.get(n) is None and resolved.get(n) is not None]
    text = " ".join(reasons)
    changed = {_group(n) for n in space.domains if config.get(n) != baseline.get(n)} - {None}
    named = [n for n in unset if n in text]
    grouped = [n for n in unset if n not in named and _group(n) in changed]
    return [*named, *grouped]


def complete(space: SearchSpace, config: Config, reasons: list[str],
             resolved: Mapping[str, Value], refused: Callable[[Config], list[str]]
             ) -> tuple[Config, list[str]] | None:
    """``config`` with the fewest partners set to the baseline's resolved values so that
    ``refused`` (the space's rules and the workload's checks) accepts it, and the partners
    set; None where no completion is accepted within MAX_ASKS asks."""
    names = candidates(space, config, reasons, resolved)
    asks = 0
    for size in range(1, len(names) + 1):
        for chosen in itertools.combinations(names, size):
            if asks >= MAX_ASKS:
                return None
            asks += 1
            point = {**config, **{n: resolved[n] for n in chosen}}
            if not refused(point):
                return point, list(chosen)
    return None
