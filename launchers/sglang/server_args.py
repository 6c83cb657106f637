"""The user's server arguments as servetune reads them: their flags and values, which of them
repeat what servetune or the space sets, and why SGLang would not read an env value."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from launchers.sglang import multinode
from launchers.sglang import preflight as sglang_parser

# Flags servetune renders itself (with SGLang's aliases); user server_args must not repeat them.
OWN_FLAGS = ("--model-path", "--model", "--tp-size", "--tensor-parallel-size", "--host", "--port",
             *multinode.FLAGS)


def missing_path(model: str) -> bool:
    """A path that does not exist; a bare 'org/name' is a hub id and is left to the server."""
    looks_like_path = model.startswith(("/", ".", "~")) or model.count("/") != 1
    return looks_like_path and not Path(model).expanduser().exists()


def flag_name(word: str) -> str | None:
    return word.split("=", 1)[0] if word.startswith("--") else None


def server_arg(server_args: list[str], flag: str) -> str | None:
    """The value a user server_args word gives ``flag`` (``--flag v`` or ``--flag=v``)."""
    for i, word in enumerate(server_args):
        if word == flag and i + 1 < len(server_args):
            return server_args[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def conflicting_server_args(server_args: list[str], knob_names: Iterable[str],
                            also: Iterable[str] = ()) -> list[str]:
    """User ``server_args`` that repeat a searched/pinned knob flag or a flag servetune sets
    itself (``--flag value`` and ``--flag=value`` alike). ``also``: further flags the
    workload renders (e.g. ``--speculative-algorithm`` when the args set it)."""
    knob_flags = {n for n in knob_names if n.startswith("--")}
    own = set(OWN_FLAGS) | set(also)
    out: list[str] = []
    for word in server_args:
        name = flag_name(word)
        if name is None:
            continue
        if name in knob_flags:
            out.append(f"server_args sets {name}, a knob of the search space: "
                       "tune or pin it there instead")
        elif name in own:
            out.append(f"server_args sets {name}, which servetune sets itself")
    return out


def env_rejection(name: str, text: str, reading: sglang_parser.EnvResult) -> str | None:
    """Why SGLang would not read ``name=text`` as given (None: it would). SGLang itself never
    says: an unknown name is ignored, a malformed value replaced by the default."""
    version = f"SGLang {reading.sglang_version}" if reading.sglang_version else "SGLang"
    if reading.known is False:
        hint = f"; closest: {reading.closest}" if reading.closest else ""
        return f"{name}: {version} has no such environment variable (it would ignore it{hint})"
    if reading.ok is False:
        return (f"{name}={text!r}: {version} reads it as {reading.env_type} and rejects it "
                f"({reading.error}); it would run with its default instead")
    return None
