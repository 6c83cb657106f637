"""Reading a launch command or best/launch.sh back as its flags and env, for comparing
flag by flag."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def flags(argv: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each ``--flag`` of ``argv`` with the words that follow it (``--flag=v`` as ``v``); a
    flag given twice fails (a command must say each once)."""
    out: dict[str, tuple[str, ...]] = {}
    name: str | None = None
    for word in argv:
        if word.startswith("--"):
            name, _, value = word.partition("=")
            assert name not in out, f"{name} given twice in {' '.join(argv)}"
            out[name] = (value,) if value else ()
        elif name is not None:
            out[name] = (*out[name], word)
    return out


def script(text: str) -> tuple[list[str], dict[str, str], list[str]]:
    """A launch.sh of one node: the exec'd argv, the exports and the unsets."""
    argv: list[str] = []
    env: dict[str, str] = {}
    unset: list[str] = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "exec":
            argv = words[1:]
        elif words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
        elif words[0] == "unset":
            unset += words[1:]
    return argv, env, unset
