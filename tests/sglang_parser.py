"""Test equipment: the installed SGLang's own argument parser, for the contract tests.

SGLang is installed for its parser only (CPU is enough; ``make sglang-parser``). Where it is
missing, a test that needs it skips off CI and fails on CI (tests/requirements.py)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

import pytest

from tests.requirements import needs, unavailable

INSTALL = ("pip install -r requirements/sglang-parser.txt && "
           "pip install --no-deps sglang==0.5.23")

# pytestmark of a module whose tests need SGLang installed.
CONTRACT = [
    pytest.mark.contract,
    needs(importlib.util.find_spec("sglang") is not None,
          reason=f"SGLang is not installed with {sys.executable} ({INSTALL})"),
]


class Rejected(Exception):
    """SGLang's parser refused the arguments (its message)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's is NoReturn; raising keeps that
        raise Rejected(message)


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's real parser, built in this process; errors raise Rejected."""
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception as err:  # the import chain needs more than sglang itself
        unavailable(f"SGLang is not importable with {sys.executable}: "
                    f"{type(err).__name__}: {err} ({INSTALL})")
    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser
