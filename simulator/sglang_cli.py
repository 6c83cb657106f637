"""SGLang's command line, captured from the installed SGLang, for the stand-in (the simulator).

The stand-in (sglang_server.py) accepts exactly the options of SGLang's own parser
(``ServerArgs.add_cli_args``), read from a fixture, sglang_cli.json, rather than from
servetune's knob catalogue: so a test that the stand-in accepts a rendered command says
something about SGLang, not about the catalogue. Regenerate the fixture after an SGLang
upgrade with

    python -m simulator.sglang_cli

(needs SGLang's parser importable); a ``contract`` test checks that it matches the installed
SGLang. Each option keeps its spellings, dest, action kind, nargs, value type, choices,
default (when JSON can hold it) and whether it is required; no help text.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("sglang_cli.json")
PROG = "sglang serve"
_KINDS = {"_StoreAction": "store", "_StoreTrueAction": "store_true",
          "_StoreFalseAction": "store_false", "_StoreConstAction": "store_const",
          "BooleanOptionalAction": "boolean_optional", "_HelpAction": "help",
          "_AppendAction": "append"}
_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str,
                                          "loads": json.loads}


def _json_or_none(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def _kind(action: argparse.Action) -> tuple[str, bool]:
    """(store | store_true | ... | other, deprecated) for one of SGLang's actions."""
    name = type(action).__name__
    deprecated = name.startswith("Deprecated")
    if deprecated:  # SGLang's deprecated variants behave as the argparse action they wrap
        name = "_" + name[len("Deprecated"):]
    return _KINDS.get(name, "other"), deprecated


def _choices(action: argparse.Action) -> list[Any] | None:
    """The choices as a list; a set's (unordered: one run differs from the next) sorted."""
    if not action.choices:
        return None
    values = list(action.choices)
    if isinstance(action.choices, (set, frozenset)):
        values.sort(key=str)
    return _json_or_none(values)


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """A parser's options as JSON-ready data (the fixture's format)."""
    options = []
    for action in parser._actions:
        kind, deprecated = _kind(action)
        options.append({
            "flags": list(action.option_strings), "dest": action.dest, "action": kind,
            "nargs": action.nargs, "type": getattr(action.type, "__name__", None),
            "choices": _choices(action),
            "const": _json_or_none(action.const), "default": _json_or_none(action.default),
            "required": action.required, "deprecated": deprecated})
    return {"prog": parser.prog, "allow_abbrev": parser.allow_abbrev, "options": options}


def capture_live() -> dict[str, Any]:
    """The installed SGLang's parser, described. Raises ImportError without SGLang."""
    from importlib.metadata import version

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog=PROG)
    ServerArgs.add_cli_args(parser)
    return {"sglang": version("sglang"), **describe(parser)}


def load_fixture(path: Path = FIXTURE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def build_parser(fixture: Mapping[str, Any]) -> argparse.ArgumentParser:
    """An argparse parser that accepts and rejects what SGLang's does (same spellings, prefix
    matching, nargs, value types where they are int/float/str/JSON, choices)."""
    parser = argparse.ArgumentParser(prog=str(fixture["prog"]),
                                     allow_abbrev=bool(fixture["allow_abbrev"]))
    for option in fixture["options"]:
        kind = option["action"]
        flags = list(option["flags"])
        common: dict[str, Any] = {"dest": option["dest"], "default": option["default"]}
        if kind == "help":
            continue  # argparse adds -h/--help itself
        if kind in ("store_true", "store_false", "store_const") and option["nargs"] == 0:
            parser.add_argument(*flags, action="store_const", const=option["const"], **common)
        elif kind == "boolean_optional":  # argparse derives --no-X from --X
            positive = [f for f in flags if not f.startswith("--no-")]
            parser.add_argument(*positive, action=argparse.BooleanOptionalAction, **common)
        else:  # store, append, and SGLang's own actions: values as given
            extra: dict[str, Any] = {"action": "append"} if kind == "append" else {}
            if option["nargs"] is not None:
                extra["nargs"] = option["nargs"]
            parser.add_argument(*flags, type=_TYPES.get(option["type"] or "str", str),
                                choices=option["choices"], required=option["required"],
                                **extra, **common)
    return parser


def given_options(args: argparse.Namespace, fixture: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang options whose parsed value is not their default, under every spelling."""
    out: dict[str, Any] = {}
    for option in fixture["options"]:
        if option["action"] == "help":
            continue
        value = getattr(args, option["dest"], None)
        if value is None or value is False or value == option["default"]:
            continue
        for flag in option["flags"]:
            if not flag.startswith("--no-"):
                out[flag] = value
    return out


def dumps(data: Mapping[str, Any]) -> str:
    """The fixture's text: one option per line (diffs show what an upgrade changed)."""
    head = {k: v for k, v in data.items() if k != "options"}
    lines = [json.dumps(o, sort_keys=True) for o in data["options"]]
    return (json.dumps(head, sort_keys=True)[:-1] + ', "options": [\n'
            + ",\n".join(lines) + "\n]}\n")


def main() -> int:
    data = capture_live()
    FIXTURE.write_text(dumps(data))
    print(f"wrote {FIXTURE}: {len(data['options'])} options of SGLang {data['sglang']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
