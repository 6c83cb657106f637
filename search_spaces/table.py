"""The knob table for README: every catalogue knob, where it comes from, its default, the
values searched when a space lists it without values, and what it does; then what each
composite choice sets. Generated from the catalogue (``servetune knobs`` prints it)."""

from __future__ import annotations

from collections.abc import Iterable

from search_spaces.composite import COMPOSITES
from search_spaces.domains import Value
from search_spaces.knobs import CATALOGUE


def _shown(value: Value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def knob_table() -> str:
    """Markdown: one row per catalogue knob, then one row per composite choice."""
    lines = [_row(["knob", "source", "default", "searched by default", "what it does"]),
             _row(["---"] * 5)]
    for knob in CATALOGUE.values():
        lines.append(_row([f"`{knob.name}`", knob.source.value, knob.default,
                           ", ".join(f"`{_shown(v)}`" for v in knob.choices), knob.help]))
    for name, composite in COMPOSITES.items():
        lines += ["", _row([f"`{name}`", "sets", "what it is"]), _row(["---"] * 3)]
        for choice, settings in composite.expansions.items():
            changed = [f"`{p}={_shown(v)}`" for p, v in settings.items()
                       if v != CATALOGUE[p].unset]
            lines.append(_row([f"`{choice}`", ", ".join(changed) or "(nothing)",
                               composite.choice_help[choice]]))
    return "\n".join(lines) + "\n"
