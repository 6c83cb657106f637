"""Which levers are likely to change a failure of a given kind: the table the failure memory
and the feasibility model read. A value that failed beside the baseline is suspect, not
guilty, while one of these levers of the space has not been changed beside it: an OOM may
pass at another memory fraction, a capture failure with other graph sizes, an NCCL error
under other NCCL settings. No Ray here.

Extend it with ``register(kind, Levers(...))`` (a workload's own failure kind, a flag the
catalogue lacks). A kind not in the table has no such lever: one failure beside the
baseline (two for a flaky kind) is enough, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from search_spaces import knobs
from search_spaces.knob import Group
from search_spaces.knobs import Value

# SGLang flags that set how GPU memory is shared out (KV pool, activations, graphs); a space
# declares them as open knobs.
MEMORY = frozenset({"--mem-fraction-static", "--max-running-requests", "--max-total-tokens",
                    "--chunked-prefill-size", "--max-prefill-tokens", "--kv-cache-dtype",
                    "--cpu-offload-gb", "--cuda-graph-max-bs", "--cuda-graph-bs",
                    "--cuda-graph-max-bs-decode", "--cuda-graph-bs-decode"})
LOW, HIGH = "low", "high"  # which end of a numeric lever is likelier to mend the failure


@dataclass(frozen=True)
class Levers:
    """The levers that matter for one failure kind: catalogue groups and knob names; for a
    failing knob of a group in ``partners``, the rest of its group too (SGLang resolves the
    speculative shape, the graph sizes, as one: a combination it refuses)."""

    groups: frozenset[Group] = frozenset()
    names: frozenset[str] = frozenset()
    partners: frozenset[Group] = frozenset()
    toward: dict[str, str] = field(default_factory=dict)  # lever -> LOW | HIGH


_GRAPH_LOW = {n: LOW for n in MEMORY if "graph" in n or n in ("--max-running-requests",
                                                              "--chunked-prefill-size")}
_NCCL = frozenset({Group.NCCL, Group.MULTICAST, Group.NETWORK})
LEVERS: dict[str, Levers] = {
    # torch's OOM: less static memory (KV pool) and smaller graphs leave more to the rest
    "cuda_oom": Levers(frozenset({Group.GRAPH}), MEMORY,
                       toward={"--mem-fraction-static": LOW, **_GRAPH_LOW}),
    # the KV pool does not fit: SGLang's own hint is a larger --mem-fraction-static
    "kv_pool_oom": Levers(names=MEMORY, toward={"--mem-fraction-static": HIGH}),
    "graph_capture": Levers(frozenset({Group.GRAPH}),
                            frozenset({"--mem-fraction-static", "--disable-cuda-graph"}),
                            toward={"--mem-fraction-static": LOW, **_GRAPH_LOW}),
    "nccl_error": Levers(_NCCL),
    "nccl_invalid_usage": Levers(frozenset({Group.NCCL})),
    "watchdog_hang": Levers(_NCCL),
    # SGLang's checks refused the launch: the value may need its partners set
    "invalid_config": Levers(partners=frozenset({Group.SPECULATIVE, Group.GRAPH})),
    # a server that crashed on a shape it accepted: on the H200, steps 1 beside the user's
    # topk 4 and draft 16 ("selected index k out of range"), where (1, 1, 2) runs
    "crashed": Levers(partners=frozenset({Group.SPECULATIVE, Group.GRAPH})),
}


def register(kind: str, levers: Levers) -> None:
    """Add or replace the levers of a failure kind."""
    LEVERS[kind] = levers


def _group(name: str) -> Group | None:
    knob = knobs.CATALOGUE.get(name)
    return knob.group if knob is not None else None


def relevant(kind: str, knob: str, names: Iterable[str]) -> tuple[str, ...]:
    """Of ``names`` (a space's knobs), those that matter for a failure of ``kind`` of a value
    of ``knob`` (never ``knob`` itself), in the space's order."""
    levers = LEVERS.get(kind)
    if levers is None:
        return ()
    own = _group(knob)
    return tuple(n for n in names if n != knob and (
        n in levers.names or _group(n) in levers.groups
        or (own in levers.partners and _group(n) == own)))


def toward(kind: str, lever: str) -> str | None:
    levers = LEVERS.get(kind)
    return levers.toward.get(lever) if levers is not None else None


def extreme(kind: str, lever: str, values: Iterable[Value]) -> Value | None:
    """The end of a numeric lever the table points to for ``kind`` (None: no way given)."""
    way = toward(kind, lever)
    numbers = [(n, v) for v in values if (n := number(v)) is not None]
    if way is None or not numbers:
        return None
    pick = min if way == LOW else max
    return pick(numbers, key=lambda pair: pair[0])[1]


def number(value: Value) -> float | None:
    """A numeric value (an integer, or text such as a memory fraction's "0.8")."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None
