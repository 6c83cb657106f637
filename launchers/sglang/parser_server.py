"""The resident SGLang reader: runs inside the interpreter that runs SGLang, not in servetune.

``preflight.py`` sends this file's source text to that interpreter (``python -c``), so that a
foreign venv or container works; it must therefore import nothing of servetune. It builds
SGLang's real argument parser, ``ServerArgs.add_cli_args(argparse.ArgumentParser(prog=
"sglang serve"))`` (as ``sglang.srt.server_args.prepare_server_args`` does), and reads
SGLang's env registry (``sglang.srt.environ.envs``); nothing past parsing runs.

Protocol: one JSON request per line on stdin, one JSON answer per line on the original
stdout, until EOF (``python -c SOURCE --version`` prints only the installed version, from its
metadata, without importing SGLang). Everything the import prints, at the Python or the C level, goes to
stderr so that it cannot corrupt an answer. Every answer carries ``importable`` and
``version``; when SGLang does not import, the one answer is ``{"importable": false,
"error": ...}`` and the process exits.

- ``{"op": "parse", "argvs": [[word, ...], ...]}`` -> ``results``: per argv ``ok``,
  ``error`` (argparse's own message) and ``warnings`` (SGLang's warnings while parsing,
  words argparse took as an abbreviation of a longer option).
- ``{"op": "env", "values": [[name, text], ...]}`` -> ``results``: per pair ``known`` (the
  registry declares the name), ``type`` and ``ok``/``error`` from the field's own
  ``parse`` (EnvBool, EnvInt, ... as SGLang reads the variable); ``closest`` names the nearest
  declared name of an unknown one.
- ``{"op": "resolve", "argvs": [[word, ...], ...]}`` -> ``results``: per argv SGLang's own
  resolution and checks (``resolution.py``): ``ok`` (None: could not run), ``error``
  (SGLang's rejection), ``resolved`` (what the server would run), ``skipped`` steps.
- ``{"op": "levers"}`` -> ``options`` (every option of the parser: names, nargs, type,
  default, choices, deprecated, hidden, help) and ``env`` (every registry field: name,
  type, default); ``env_error`` when the registry cannot be read.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO


def _resolution() -> Any:
    """resolution.py: the copy sent along with this file (resident.server_source), or, where
    this file is imported from disk, the file beside it."""
    module = sys.modules.get("servetune_resolution")
    if module is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "servetune_resolution", os.path.join(os.path.dirname(__file__), "resolution.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["servetune_resolution"] = module
        spec.loader.exec_module(module)
    return module

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
VERSION_ARG = "--version"  # ``python -c SOURCE --version``: print the version as JSON, exit
ENV_TYPES = ("EnvBool", "EnvInt", "EnvFloat", "EnvStr", "EnvTuple", "EnvJSON")


class Rejected(Exception):
    """argparse refused the argv; the message is its own."""


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise Rejected(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise Rejected((message or "").strip()
                       or f"argparse exited with status {status} (e.g. --help)")


class Collect(logging.Handler):
    """SGLang's own warnings while one argv is parsed (deprecated flags say so there)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("sglang"):
            self.messages.append(_ANSI.sub("", record.getMessage()))


def abbreviations(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """argparse accepts a unique prefix of an option: a flag renamed to a longer name still
    parses, silently meaning the new one. Say so."""
    options = parser._option_string_actions
    found = []
    for word in argv:
        name = word.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and name not in options:
            longer = sorted(o for o in options if o.startswith(name))
            found.append(f"{name} is not an option of this SGLang: argparse took it as an "
                         f"abbreviation of {' or '.join(longer) or 'another option'}")
    return found


def parse(parser: argparse.ArgumentParser, argvs: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for argv in argvs:
        collect = Collect()
        logging.getLogger().addHandler(collect)
        try:
            parser.parse_args(list(argv))
            results.append({"ok": True, "warnings": abbreviations(parser, argv) + collect.messages})
        except Rejected as err:
            results.append({"ok": False, "error": str(err), "warnings": collect.messages})
        except Exception as err:  # SGLang's own type functions raise what they like
            results.append({"ok": False, "error": f"{type(err).__name__}: {err}",
                            "warnings": collect.messages})
        finally:
            logging.getLogger().removeHandler(collect)
    return results


def _plain(value: Any) -> Any:
    """A JSON-able form of a default or a choice."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def describe_options(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of the parser, once each (aliases together)."""
    out = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        help_text = action.help if isinstance(action.help, str) else ""
        hidden = help_text == argparse.SUPPRESS
        out.append({
            "names": list(action.option_strings),
            "nargs": action.nargs,
            "type": getattr(action.type, "__name__", None) if action.type else None,
            "default": _plain(action.default),
            "choices": _plain(list(action.choices)) if action.choices is not None else None,
            "deprecated": "deprecated" in type(action).__name__.lower()
                          or "deprecated" in help_text.lower(),
            "hidden": hidden,
            "help": "" if hidden else " ".join(help_text.split()),
        })
    return out


def env_fields(registry: Any) -> dict[str, Any]:
    """The registry's fields by name: every EnvField declared on its class."""
    from sglang.srt.environ import EnvField

    fields: dict[str, Any] = {}
    for klass in reversed(type(registry).__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, EnvField):
                fields[name] = value
    return fields


def env_type(field: Any) -> str:
    """The field's SGLang type (EnvBoolWithAlias reads as EnvBool)."""
    names = [k.__name__ for k in type(field).__mro__]
    return next((n for n in names if n in ENV_TYPES), names[0])


def describe_env(fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, "type": env_type(field),
             "default": "(computed)" if callable(field.default) else _plain(field.default)}
            for name, field in sorted(fields.items())]


def parse_env(fields: dict[str, Any], values: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """Each (name, text) as SGLang would read it: ``field.parse`` raising ValueError is the
    value SGLang would ignore with a warning, falling back to its default."""
    results: list[dict[str, Any]] = []
    for name, text in values:
        field = fields.get(name)
        if field is None:
            closest = difflib.get_close_matches(name, list(fields), n=1)
            results.append({"known": False, "ok": False, "error": "", "type": None,
                            "closest": closest[0] if closest else None})
            continue
        try:
            field.parse(text)
            results.append({"known": True, "ok": True, "error": "", "type": env_type(field)})
        except (ValueError, OSError) as err:
            results.append({"known": True, "ok": False, "error": str(err),
                            "type": env_type(field)})
    return results


class Reader:
    """SGLang's parser and env registry, built once; answers requests."""

    def __init__(self) -> None:
        _resolution().install_placeholders()  # before SGLang's imports (some releases need them)
        from sglang.srt.server_args import ServerArgs

        self.parser = Parser(prog="sglang serve")
        ServerArgs.add_cli_args(self.parser)
        self.version = _version()
        self.fields: dict[str, Any] | None = None
        self.env_error = ""
        try:
            from sglang.srt.environ import envs

            self.fields = env_fields(envs)
        except Exception as err:  # an SGLang without the registry: flags still checked
            self.env_error = f"{type(err).__name__}: {err}"

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = {"importable": True, "version": self.version}
        op = request.get("op")
        if op == "parse":
            reply["results"] = parse(self.parser, request.get("argvs", []))
        elif op == "env" and self.fields is not None:
            reply["results"] = parse_env(self.fields, request.get("values", []))
        elif op == "resolve":
            reply["results"] = _resolution().resolve(self.parser, request.get("argvs", []),
                                                     Rejected)
        elif op == "levers":
            reply["options"] = describe_options(self.parser)
            reply["env"] = describe_env(self.fields) if self.fields is not None else None
        else:
            reply["error"] = self.env_error if op == "env" else f"unknown request {op!r}"
        if self.env_error:
            reply["env_error"] = self.env_error
        return reply


def _version() -> str | None:
    try:
        import sglang

        return str(sglang.__version__)
    except Exception:
        return None


def serve(lines: TextIO, reply: Callable[[dict[str, Any]], None]) -> None:
    try:
        reader = Reader()
    except Exception as err:
        reply({"importable": False, "error": f"{type(err).__name__}: {err}"})
        return
    for line in lines:
        if line.strip():
            reply(reader.answer(json.loads(line)))


def installed_version() -> str | None:
    """The installed SGLang's version from its metadata: cheap (no torch), for cache keys."""
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return None


def main() -> None:
    if sys.argv[1:] == [VERSION_ARG]:
        print(json.dumps(installed_version()))
        return
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # C-level prints of the import land on stderr
    sys.stdout = sys.stderr

    def reply(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    serve(sys.stdin, reply)


if __name__ == "__main__":
    main()
