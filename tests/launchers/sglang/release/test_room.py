"""The release room is pure: it imports nothing of servetune outside itself (so search_spaces/
and the proxy may read it from the floor below launchers/), and nothing that starts a process."""

from __future__ import annotations

import ast
from pathlib import Path

ROOM = Path(__file__).resolve().parents[4] / "launchers" / "sglang" / "release"
ALLOWED = ("__future__", "collections", "dataclasses", "re", "typing", "launchers.sglang.release")


def test_the_room_imports_only_itself_and_the_standard_library() -> None:
    found = {}
    for path in sorted(ROOM.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if not any(name == a or name.startswith(a + ".") for a in ALLOWED):
                    found.setdefault(path.name, []).append(name)
    assert found == {}
    assert len(list(ROOM.glob("*.py"))) >= 8
