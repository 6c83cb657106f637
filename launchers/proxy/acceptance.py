"""The accept length behind the proxy's ``est_tok_s``, per speculative shape.

``est_tok_s`` = batch x accept length / (verify + draft). Held at one assumed value while the
shape changes, it credits a small shape with accepting every token it drafts and ranks it
best. So the proxy ranks speculative shapes only with a measured accept length per shape (a
server experiment's, ``--accept-length-from``): shapes without one leave the space, and with
no measurement at all the speculative knobs leave it, each with the reason. The accept length
of a shape that was not searched (the config leaves the knobs unset) is the measured one
where it exists, else the assumed ``accept_length``, labelled as such in every round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from search_spaces.knobs import SPECULATIVE_KNOBS, Value
from search_spaces.space import Allowed, SearchSpace

ASSUMED = "assumed"
MEASURED = "measured"


class MeasuredAccept(BaseModel):
    """One speculative shape (None: the server's default for that knob) and its accept
    length as a server measured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    steps: int | None = Field(None, ge=1)
    topk: int | None = Field(None, ge=1)
    draft_tokens: int | None = Field(None, ge=1)
    accept_length: float = Field(gt=0)
    launches: int = Field(1, ge=1, description="server launches the mean is over")
    source: str = Field("", description="the experiment folder it was read from")

    @property
    def shape(self) -> tuple[Value, ...]:
        return (self.steps, self.topk, self.draft_tokens)


def shape_of(config: Mapping[str, Value]) -> tuple[Value, ...]:
    """A configuration's speculative shape, in SPECULATIVE_KNOBS order."""
    return tuple(config.get(k) for k in SPECULATIVE_KNOBS)


def lookup(table: Sequence[MeasuredAccept], config: Mapping[str, Value]
           ) -> MeasuredAccept | None:
    shape = shape_of(config)
    return next((m for m in table if m.shape == shape), None)


def _shape_text(shape: tuple[Value, ...]) -> str:
    return " ".join(f"{k}={'default' if v is None else v}"
                    for k, v in zip(SPECULATIVE_KNOBS, shape, strict=True))


def rankable(space: SearchSpace, table: Sequence[MeasuredAccept]
             ) -> tuple[SearchSpace, list[str]]:
    """The space with only the speculative shapes ``table`` measured (the baseline's shape
    among them), or without the speculative knobs; the notes say why."""
    searched = [k for k in SPECULATIVE_KNOBS if k in space.domains]
    if not searched:
        return space, []
    measured = {m.shape for m in table}
    baseline = shape_of(space.baseline())
    if not measured or baseline not in measured:
        why = ("no measured accept length for any speculative shape" if not measured else
               f"no measured accept length for the baseline's shape ({_shape_text(baseline)})")
        note = (f"{', '.join(searched)}: {why}; an assumed accept length would rank the "
                "smallest shape best, so the proxy does not rank speculative shapes: pass "
                "--accept-length-from a server experiment that measured them")
        return _without(space, set(searched)), [note]
    domains = dict(space.domains)
    notes: list[str] = []
    for i, knob in enumerate(SPECULATIVE_KNOBS):
        if knob not in domains:
            continue
        seen = {shape[i] for shape in measured}
        gone = [v for v in domains[knob] if v not in seen]
        kept = tuple(v for v in domains[knob] if v in seen)
        if gone:
            notes.append(f"{knob}={', '.join(map(str, gone))}: no measured accept length "
                         "with this value")
        if len(kept) > 1:
            domains[knob] = kept
        else:
            del domains[knob]
    sources = sorted({m.source for m in table if m.source})
    notes.append(f"speculative shapes: only the {len(measured)} with a measured accept length "
                 f"are ranked ({', '.join(sources) or 'given'})")
    allowed = Allowed(SPECULATIVE_KNOBS, frozenset(measured),
                      "no measured accept length for this speculative shape")
    narrowed = _without(replace(space, domains=domains), set(space.domains) - set(domains))
    return replace(narrowed, allowed=(*narrowed.allowed, allowed)), notes


def _without(space: SearchSpace, names: set[str]) -> SearchSpace:
    domains = {n: v for n, v in space.domains.items() if n not in names}
    stages = tuple(replace(s, knobs=tuple(k for k in s.knobs if k not in names))
                   for s in space.stages)
    return replace(space, domains=domains, stages=stages)
