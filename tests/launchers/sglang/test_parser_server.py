"""The resident reader's own functions, in process, with a parser and fields built here."""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from typing import Any

import pytest

from launchers.sglang import parser_server as ps


def _parser() -> ps.Parser:
    parser = ps.Parser(prog="sglang serve")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--cuda-graph-bs-decode", type=int, nargs="+")
    parser.add_argument("--enable-symm-mem", action="store_true")
    parser.add_argument("--load-format", default="auto", choices=["auto", "dummy"])
    parser.add_argument("--old", action="store_true", help="(Deprecated: use --new)")
    parser.add_argument("--internal", help=argparse.SUPPRESS)
    return parser


def test_parse_verdicts_and_warnings(caplog: pytest.LogCaptureFixture) -> None:
    parser = _parser()
    ok, abbreviated, bad = ps.parse(parser, [
        ["--model-path", "m", "--cuda-graph-bs-decode", "1", "2", "4"],
        ["--model-path", "m", "--enable-symm"],
        ["--model-path", "m", "--load-format", "tensorized"]])
    assert ok == {"ok": True, "warnings": []}
    assert abbreviated["ok"] is True and abbreviated["warnings"] == [
        "--enable-symm is not an option of this SGLang: argparse took it as an abbreviation "
        "of --enable-symm-mem"]
    assert bad["ok"] is False and "invalid choice: 'tensorized'" in bad["error"]


def test_sglang_warnings_while_parsing_are_kept_without_colours() -> None:
    parser = _parser()

    class Warn(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
            logging.getLogger("sglang.x").warning("\x1b[1;33m%s is deprecated\x1b[0m", option)

    parser.add_argument("--warned", action=Warn, nargs=0)
    (result,) = ps.parse(parser, [["--model-path", "m", "--warned"]])
    assert result == {"ok": True, "warnings": ["--warned is deprecated"]}


def test_help_and_exit_become_rejections() -> None:
    (result,) = ps.parse(_parser(), [["--help"]])
    assert result["ok"] is False and "exited" in result["error"]


def test_options_are_described_once_with_their_shape() -> None:
    options = {o["names"][0]: o for o in ps.describe_options(_parser())}
    assert "-h" not in options and "--help" not in options
    assert options["--cuda-graph-bs-decode"]["nargs"] == "+"
    assert options["--cuda-graph-bs-decode"]["type"] == "int"
    assert options["--enable-symm-mem"] == {
        "names": ["--enable-symm-mem"], "nargs": 0, "type": None, "default": False,
        "choices": None, "deprecated": False, "hidden": False, "help": ""}
    assert options["--load-format"]["choices"] == ["auto", "dummy"]
    assert options["--old"]["deprecated"] is True
    assert options["--internal"]["hidden"] is True
    json.dumps(list(options.values()))  # the answer is JSON


class EnvField:
    def __init__(self, default: Any) -> None:
        self.default = default


class EnvBool(EnvField):
    def parse(self, value: str) -> bool:
        if value.lower() in ("1", "true", "0", "false"):
            return value.lower() in ("1", "true")
        raise ValueError(f'"{value}" is not a valid boolean value')


class EnvBoolWithAlias(EnvBool):
    pass


def test_env_reading_follows_the_fields_parse() -> None:
    fields: dict[str, Any] = {"SGLANG_A": EnvBool(False), "SGLANG_B": EnvBoolWithAlias(True)}
    good, bad, unknown = ps.parse_env(fields, [("SGLANG_A", "1"), ("SGLANG_B", "maybe"),
                                               ("SGLANG_AA", "1")])
    assert good == {"known": True, "ok": True, "error": "", "type": "EnvBool"}
    assert bad == {"known": True, "ok": False, "error": '"maybe" is not a valid boolean value',
                   "type": "EnvBool"}
    assert unknown["known"] is False and unknown["closest"] == "SGLANG_A"
    assert ps.describe_env(fields) == [
        {"name": "SGLANG_A", "type": "EnvBool", "default": False},
        {"name": "SGLANG_B", "type": "EnvBool", "default": True}]


def test_an_sglang_that_does_not_import_answers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sglang.srt.server_args", None)
    replies: list[dict[str, Any]] = []
    ps.serve(io.StringIO('{"op": "parse", "argvs": []}\n'), replies.append)
    assert len(replies) == 1 and replies[0]["importable"] is False
    assert replies[0]["error"].startswith("ModuleNotFoundError")


def test_the_module_imports_nothing_of_servetune() -> None:
    source = ps.__loader__.get_source(ps.__name__) if ps.__loader__ else None  # type: ignore[union-attr]
    assert source is not None
    imports = [line for line in source.splitlines() if line.strip().startswith(("import ", "from "))]
    assert not [line for line in imports if any(p in line for p in ("launchers", "search_spaces",
                                                                    "tuner"))]
