"""Which interpreter runs SGLang for a server command (so that its own parser checks it).

``X [opts] -m sglang...`` -> X; a console script (``sglang serve``) -> the interpreter of its
shebang, pip's ``/bin/sh`` trampoline for long paths and uv's relocatable one included.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

_PYTHON_NAME = re.compile(r"^(python|pypy)")
# pip's /bin/sh trampoline (for long or spaced paths), and uv's relocatable one.
_SH_EXEC = re.compile(r"""^'''exec' (?P<q>["']?)(?P<path>[^$]+?)(?P=q) "\$0" "\$@"$""")
_SH_EXEC_RELOCATABLE = re.compile(
    r"""^'''exec' "\$\(dirname -- "\$\(realpath -- "\$0"\)"\)"/'(?P<name>[^']+)' "\$0" "\$@"$"""
)


def python_for(server_cmd: Sequence[str]) -> str | None:
    """The interpreter that runs SGLang for a server command, or None (use sys.executable).

    ``X [opts] -m sglang...`` -> X; a console script (``sglang serve``) -> the interpreter
    of its shebang (pip's ``/bin/sh`` trampoline for long paths included).
    """
    if not server_cmd:
        return None
    first = server_cmd[0]
    if _runs_sglang_module(server_cmd[1:]):
        found = shutil.which(first) or first
        return os.path.abspath(found) if os.sep in found else found
    script = shutil.which(first)
    if script is None:
        return None
    return _shebang_python(Path(script))


def _runs_sglang_module(args: Sequence[str]) -> bool:
    """Whether interpreter arguments are ``[options] -m sglang...``."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-m":
            return i + 1 < len(args) and args[i + 1].split(".")[0] == "sglang"
        if not word.startswith("-") or word in ("-c", "-"):
            return False  # a script, a command string or stdin: not the module form
        i += 2 if word in ("-X", "-W") else 1
    return False


def _shebang_python(script: Path) -> str | None:
    try:
        with script.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    try:
        words = shlex.split(head[0][2:].strip())
    except ValueError:
        return None
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return (shutil.which(names[0]) or None) if names else None
    if Path(words[0]).name in ("sh", "bash") and len(head) > 1:
        line = head[1].strip()
        if match := _SH_EXEC.match(line):
            return match.group("path")
        if match := _SH_EXEC_RELOCATABLE.match(line):
            return str(script.resolve().parent / match.group("name"))
        return None
    return words[0] if _PYTHON_NAME.match(Path(words[0]).name) else None


def interpreter_id(python: str | None) -> str:
    """The cache identity of an interpreter: an absolute path, symlinks kept (a venv's
    python is a symlink to the base one, and the two see different packages)."""
    name = python or sys.executable
    found = shutil.which(name) or name
    return os.path.abspath(found) if os.sep in found else found
