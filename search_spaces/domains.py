"""Value domains: the checks behind every knob, and NCCL's selector syntax.

A check takes a value and returns the reason it is outside the domain (None: inside). Facts
behind the NCCL rules are in shared/reference/nccl.md.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

Value = str | int | bool | None
Checker = Callable[[Value], str | None]

# NCCL_ALGO / NCCL_PROTO tokens, lower-cased (NCCL matches case-insensitively).
NCCL_ALGORITHMS = ("ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
NCCL_PROTOCOLS = ("ll", "ll128", "simple")
NCCL_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


def one_of(*allowed: Value) -> Checker:
    def check(value: Value) -> str | None:
        if value in allowed and type(value) in {type(a) for a in allowed}:
            return None
        return f"must be one of {', '.join(repr(a) for a in allowed)}"

    return check


def boolean(value: Value) -> str | None:
    """A switch: a boolean flag whose off state is its unset state."""
    return None if isinstance(value, bool) else "must be true or false"


def int_in(low: int, high: int, *, multiple_of: int = 1, power_of_two: bool = False) -> Checker:
    def check(value: Value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not low <= value <= high:
            return f"must be in [{low}, {high}], got {value}"
        if value % multiple_of:
            return f"must be a multiple of {multiple_of}, got {value}"
        if power_of_two and value & (value - 1):
            return f"must be a power of two, got {value}"
        return None

    return check


def whole_number(low: int, high: int) -> Checker:
    """An integer in [low, high], also written as text (a pinned value from the command line
    of a knob with no default choices to type it by)."""
    bounded = int_in(low, high)

    def check(value: Value) -> str | None:
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return bounded(int(value))
        return bounded(value)

    return check


_WORD = re.compile(r"^[A-Za-z0-9_.:/+-]+$")


def word(value: Value) -> str | None:
    """One word of text (a name SGLang's own parser checks further, e.g. a load format)."""
    if isinstance(value, str) and _WORD.match(value):
        return None
    return f"must be one word (letters, digits, _ . : / + -), got {value!r}"


_INTERFACES = re.compile(r"^[\^=]?[A-Za-z0-9_.-]+(:\d+)?(,[A-Za-z0-9_.-]+(:\d+)?)*$")


def nccl_interfaces(value: Value) -> str | None:
    """NCCL's device list (NCCL_IB_HCA, NCCL_SOCKET_IFNAME): names with an optional ``:port``,
    comma-separated; a leading ``^`` excludes them, ``=`` asks for exact names, not prefixes."""
    if isinstance(value, str) and _INTERFACES.match(value):
        return None
    return f"must be device names, e.g. 'mlx5_0:1,mlx5_1:1', '^mlx5_2' or '=eth0', got {value!r}"


_NAMES = re.compile(r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")


def interface_names(value: Value) -> str | None:
    """Gloo's interface list (GLOO_SOCKET_IFNAME): exact names, comma-separated; no NCCL
    prefix syntax (``^``, ``=``) and no ``:port``."""
    if isinstance(value, str) and _NAMES.match(value):
        return None
    return f"must be interface names, e.g. 'eth0' or 'eth0,eth1', got {value!r}"


def int_list(low: int, high: int) -> Checker:
    """A list value written ``"1,2,4,8"``: integers in [low, high], strictly increasing (one
    spelling per list, so that a search never tries the same list twice)."""

    def check(value: Value) -> str | None:
        if not isinstance(value, str) or not value.strip():
            return f"must be integers separated by commas, e.g. '1,2,4,8', got {value!r}"
        try:
            numbers = [int(part) for part in value.split(",")]
        except ValueError:
            return f"must be integers separated by commas, e.g. '1,2,4,8', got {value!r}"
        outside = [n for n in numbers if not low <= n <= high]
        if outside:
            return f"every entry must be in [{low}, {high}], got {outside[0]}"
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            return f"entries must be strictly increasing, got {value!r}"
        return None

    return check


def list_words(value: str) -> list[str]:
    """The argv words of a list value (``"1,2,4"`` -> ``["1", "2", "4"]``)."""
    return [part.strip() for part in value.split(",")]


# ---------------------------------------------------------------- NCCL selectors


def _nccl_token_list(tokens: str, known: tuple[str, ...], what: str) -> str | None:
    words = tokens[1:] if tokens.startswith("^") else tokens
    parts = [w.strip().lower() for w in words.split(",")]
    bad = [p for p in parts if p not in known]
    if not parts or bad:
        return f"unknown {what} {', '.join(repr(b) for b in bad) or '(empty)'}; known: {', '.join(known)}"
    return None


def nccl_selector(known: tuple[str, ...], what: str) -> Checker:
    """NCCL_ALGO / NCCL_PROTO syntax: ``Ring,Tree``, ``^LL128``, or ``allreduce:tree;allgather:ring``."""

    def check(value: Value) -> str | None:
        if not isinstance(value, str) or not value.strip():
            return f"must be a non-empty string, got {value!r}"
        for clause in value.split(";"):
            if ":" in clause:
                collective, tokens = clause.split(":", 1)
                if collective.strip().lower() not in NCCL_COLLECTIVES:
                    return f"unknown collective {collective!r}; known: {', '.join(NCCL_COLLECTIVES)}"
            else:
                tokens = clause
            reason = _nccl_token_list(tokens.strip(), known, what)
            if reason:
                return reason
        return None

    return check


def is_global_selector(value: Value) -> bool:
    """True for an NCCL_ALGO/PROTO value that applies to every collective (no ``coll:`` prefix)."""
    return isinstance(value, str) and ":" not in value


def selector_for(value: Value, collective: str) -> list[str] | None:
    """The tokens an NCCL_ALGO/PROTO value selects for ``collective`` (None: not restricted).

    ``^`` exclusions are returned with their caret, e.g. ``["^ll128"]``.
    """
    if not isinstance(value, str):
        return None
    for clause in value.split(";"):
        if ":" in clause:
            coll, tokens = clause.split(":", 1)
            if coll.strip().lower() != collective:
                continue
        else:
            tokens = clause
        tokens = tokens.strip().lower()
        if tokens.startswith("^"):
            return ["^" + t.strip() for t in tokens[1:].split(",")]
        return [t.strip() for t in tokens.split(",")]
    return None
