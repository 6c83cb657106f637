"""The decision an experiment ends with, typed: which configuration to launch, and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from search_spaces.knobs import Value

DecisionKind = Literal["confirmed", "default", "unconfirmed", "none"]
KINDS: tuple[str, ...] = ("confirmed", "default", "unconfirmed", "none")


@dataclass
class Decision:
    """``confirmed``: a config beat the baseline beyond noise; ``default``: keep the default
    settings (the baseline's config); ``unconfirmed``: the search's best, not checked against
    noise; ``none``: nothing completed. ``text`` says why, with the numbers."""

    kind: DecisionKind
    text: str
    label: str | None = None
    config: dict[str, Value] | None = None
    source_trial: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Decision | None:
        if not data or data.get("kind") not in KINDS:
            return None
        config = data.get("config")
        return cls(data["kind"], str(data.get("text") or ""), data.get("label"),
                   dict(config) if isinstance(config, Mapping) else None,
                   data.get("source_trial"))
