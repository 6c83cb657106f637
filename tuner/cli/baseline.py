"""The user's own settings as the baseline: the ``--server-arg`` flags and the environment
variables of the user's shell that set a knob of the space are taken out of the server's
arguments and become the knob's baseline value (ExperimentSpec.baseline); each trial's value
overrides them, and the unset value stays one more point to try."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from search_spaces import knobs
from search_spaces.space import SearchSpace

Parse = Callable[[str, str, SearchSpace], knobs.Value]  # a knob's value from its text


def _flag_values(words: Sequence[str], flags: set[str]) -> tuple[dict[str, str], list[str]]:
    """``--flag value``, ``--flag=value`` and a bare switch (``true``) for ``flags``; the
    other words kept in order."""
    found: dict[str, str] = {}
    kept: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if word.startswith("--") and name in flags:
            if eq:
                found[name] = inline
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                found[name] = words[i + 1]
                i += 1
            else:
                found[name] = "true"
        else:
            kept.append(word)
        i += 1
    return found, kept


def user_baseline(workload: Mapping[str, Any], space: SearchSpace, parse: Parse,
                  environ: Mapping[str, str] | None = None
                  ) -> tuple[dict[str, knobs.Value], dict[str, Any]]:
    """The baseline values the user's settings give searched knobs, and the workload's args
    without the flags that gave them. A knob both pinned and set in ``--server-arg`` is bad
    input (ValueError); composites' primitives are left to the workload's own checks."""
    env = os.environ if environ is None else environ
    flags = {n for n in space.domains if n.startswith("--")}
    words = list(workload.get("server_args") or [])
    given, kept = _flag_values(words, flags | {n for n in space.pins if n.startswith("--")})
    pinned = sorted(set(given) & set(space.pins))
    if pinned:
        raise ValueError(f"--server-arg sets {', '.join(pinned)}, which --pin sets too: say it "
                       "once")
    texts = {**given, **{n: env[n] for n in space.domains
                         if not n.startswith("--") and n in env and space.knob(n).kind
                         is knobs.KnobKind.ENV}}
    baseline = {name: parse(name, text, space) for name, text in texts.items()}
    out = dict(workload)
    if given:
        out["server_args"] = kept
    return baseline, out
