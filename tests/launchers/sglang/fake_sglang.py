"""A stand-in ``sglang`` package (parser and env registry) and stand-in interpreters.

``FakePython`` is an interpreter path: a shell script that logs each call and runs this
Python with the fake ``sglang`` first on PYTHONPATH, so that the preflight's real subprocess
path runs end to end in a few hundred milliseconds.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

FAKE_SERVER_ARGS = '''
import argparse
import logging


class _Deprecated(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        logging.getLogger("sglang.fake").warning(
            "\\033[1;33m'%s' is deprecated\\033[0m", option_string)
        setattr(namespace, self.dest, True)


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--enable-symm-mem", action="store_true")
        parser.add_argument("--disable-cuda-graph", action=_Deprecated)
'''

# The registry's shape as sglang/srt/environ.py declares it (EnvField descriptors on Envs).
FAKE_ENVIRON = '''
class EnvField:
    def __init__(self, default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name


class EnvBool(EnvField):
    def parse(self, value):
        value = value.lower()
        if value in ["true", "1", "yes", "y"]:
            return True
        if value in ["false", "0", "no", "n"]:
            return False
        raise ValueError(f'"{value}" is not a valid boolean value')


class EnvInt(EnvField):
    def parse(self, value):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f'"{value}" is not a valid integer value')


class EnvBoolWithAlias(EnvBool):
    pass


class Envs:
    SGLANG_ENABLE_PCIE_IPC_ALLREDUCE = EnvBool(False)
    SGLANG_PCIE_IPC_MAX_NUMEL = EnvInt(0)
    SGLANG_OLD_SPELLING = EnvBoolWithAlias(True)
    SGLANG_LOG_MS = EnvBool(False)  # the plan sets it (millisecond log times)


envs = Envs()
'''

BASE = ["--model-path", "/models/x"]


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_sglang(root: Path, version: str = "0.0.1", broken: bool = False) -> Path:
    """A fake ``sglang`` package (and its dist-info, for the version) under ``root``."""
    package = root / "sglang"
    (package / "srt").mkdir(parents=True, exist_ok=True)
    if broken:
        (package / "__init__.py").write_text("import triton_is_not_here  # noqa\n")
    else:
        (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    (package / "srt" / "environ.py").write_text(FAKE_ENVIRON)
    for old in root.glob("sglang-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


class FakePython:
    """An interpreter path that runs this Python with the fake sglang, logging each call."""

    def __init__(self, folder: Path, *, broken: bool = False) -> None:
        self.site = _fake_sglang(folder / "site", broken=broken)
        self.log = folder / "calls.log"
        self.path = executable(folder / "python-fake", (
            "#!/bin/sh\n"
            f'if [ "$3" = --version ]; then echo version >> "{self.log}"; else\n'
            f'case "$2" in *add_cli_args*) echo parse >> "{self.log}";; '
            f'*) echo other >> "{self.log}";; esac; fi\n'
            f'PYTHONPATH="{self.site}" exec "{sys.executable}" "$@"\n'
        ))

    @property
    def parses(self) -> int:
        return self.log.read_text().count("parse") if self.log.exists() else 0

    def set_version(self, version: str) -> None:
        _fake_sglang(self.site, version)

    def __str__(self) -> str:
        return str(self.path)
