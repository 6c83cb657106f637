"""One knob: a setting servetune can tune, with its domain, where it comes from and how it renders.

A knob is an environment variable (NCCL's, SGLang's, PyTorch's), a server command-line flag,
or a composite that stands for several of those at once (see ``composite.py``). The value
``None`` means "leave it unset" (the library's or server's own default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from search_spaces.domains import Checker, Value, boolean, list_words


class KnobKind(str, Enum):
    ENV = "env"
    FLAG = "flag"
    COMPOSITE = "composite"  # expands into flags and env (composite.py); renders nothing itself


class Group(str, Enum):
    NCCL = "nccl"
    NETWORK = "network"  # NCCL between nodes: used only by a trial that spans nodes
    MULTICAST = "multicast"
    FUSION = "fusion"
    ALLREDUCE = "allreduce"
    GRAPH = "graph"
    SPECULATIVE = "speculative"
    SETUP = "setup"  # how the server starts (weights, warm-up), not how it communicates
    OPEN = "open"  # declared by a space, not in the catalogue


class Source(str, Enum):
    """Who reads the setting, as the knob table prints it."""

    NCCL = "NCCL env"
    SGLANG_FLAG = "SGLang flag"
    SGLANG_ENV = "SGLang env"
    TORCH = "PyTorch env"
    NVSHMEM = "NVSHMEM env"
    ENV = "env"  # an open knob's variable that none of the above owns
    SERVETUNE = "servetune"  # a composite: several of the above at once


@dataclass(frozen=True)
class Knob:
    """One setting. ``check`` returns a reason when a value is outside the domain."""

    name: str
    kind: KnobKind
    group: Group
    help: str
    choices: tuple[Value, ...]  # the default search values (None = unset is added by spaces)
    check: Checker
    warnings: Mapping[str, str] = field(default_factory=dict)  # value (as text) -> why flagged
    source: Source = Source.NCCL
    default: str = ""  # what the owner does when the setting is unset, as its docs/code state
    list_valued: bool = False  # a flag taking several words; the value is written "1,2,4"
    declared: bool = False  # an open knob: declared by a space, not in the catalogue

    @property
    def is_switch(self) -> bool:
        """A boolean flag: off (False) is its unset state."""
        return self.check is boolean

    @property
    def unset(self) -> Value:
        return False if self.is_switch else None

    def validate(self, value: Value) -> str | None:
        if value is None:
            return None
        return self.check(value)

    def warning(self, value: Value) -> str | None:
        if value is None:
            return None
        key = str(value).lower()
        return next((why for flagged, why in self.warnings.items() if flagged == key), None)

    def render_env(self, value: Value) -> str | None:
        """The env var's text, or None when the variable is left unset."""
        if self.kind is not KnobKind.ENV or value is None:
            return None
        if isinstance(value, bool):
            return "1" if value else "0"
        return str(value)

    def render_argv(self, value: Value) -> list[str]:
        """The flag's argv words; ``[]`` when unset (or a boolean flag that is off)."""
        if self.kind is not KnobKind.FLAG or value is None or value is False:
            return []
        if value is True:
            return [self.name]
        if self.list_valued:
            return [self.name, *list_words(str(value))]
        if self.declared:  # an open flag's text: one word per whitespace-separated part
            return [self.name, *str(value).split()]
        return [self.name, str(value)]
