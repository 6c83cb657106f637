"""The preflight's answers on disk: one JSON file per experiment, merged by every writer.

Keys name the interpreter, the installed SGLang version (so that an upgrade invalidates
them) and what was asked: an argv, or one env variable's value.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CACHE_FORMAT = 1


def argv_key(interpreter: str, version: str, argv: Sequence[str]) -> str:
    return json.dumps([interpreter, version, list(argv)])


def resolve_key(interpreter: str, version: str, argv: Sequence[str]) -> str:
    return json.dumps([interpreter, version, {"resolve": list(argv)}])


def env_key(interpreter: str, version: str, name: str, text: str) -> str:
    return json.dumps([interpreter, version, {"env": name, "value": text}])


def load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        logger.debug("preflight cache %s unreadable (%s): ignored", path, err)
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(v, dict) and isinstance(v.get("ok"), bool)}


def store(path: Path, new: dict[str, dict[str, Any]]) -> None:
    """Merge ``new`` into the file: re-read, write a temp file beside it, os.replace.

    Concurrent writers never leave a torn file; at worst one's fresh entries are lost and
    asked again later.
    """
    if not new:
        return
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = load(path)
        entries.update(new)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump({"format": CACHE_FORMAT, "entries": entries}, handle, indent=0)
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        logger.warning("preflight cache %s not written: %s", path, err)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
