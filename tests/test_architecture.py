"""The house rules of ARCHITECTURE.md, checked from the code itself: no import circle inside
tuner/, launchers/, search_spaces/, simulator/ or benchmarks/ (function-level and TYPE_CHECKING imports
count too); no upward arrow between floors; the stand-in imports nothing of the engine and
nothing imports the simulator but benchmarks/ and tests/; benchmarks/ imports nothing of
tests/; Ray imported only by the modules that run trials; no module that only reads files
pulls Ray in; no private (``_``-prefixed) Ray attribute anywhere; no module over 400 lines
unless it says why below."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tuner", "launchers", "search_spaces", "simulator")

# The modules that run trials or feed them (Ray Tune's searchers, callbacks, the Tuner).
RAY_MODULES = frozenset({
    "tuner.run.cluster", "tuner.run.fit", "tuner.run.recorder", "tuner.run.progress",
    "tuner.run.trainable", "tuner.run.dashboard", "tuner.run.experiment", "tuner.run.confirm",
    "tuner.run.screen", "tuner.run.trackers", "tuner.run.environment", "tuner.search.base",
    "tuner.search.space_searcher", "tuner.search.filtering", "tuner.search.staged",
    "tuner.search.fixed", "tuner.search.build", "tuner.run.nodes", "tuner.search.auto",
    "tuner.search.adaptive", "tuner.search.tied", "tuner.search.wrappers.base",
    "tuner.search.wrappers.pins", "tuner.search.wrappers.refusal",
    "tuner.search.wrappers.dedupe", "tuner.search.wrappers.failures",
    "tuner.search.wrappers.reask",
})
# Modules that must work without Ray: reading results, deciding, reporting, one trial.
RAY_FREE = ("tuner.output.report", "tuner.output.results", "tuner.output.exports",
            "tuner.output.plots", "tuner.output.profile_report", "tuner.decide.confirm",
            "tuner.run.trial", "tuner.run.lifecycle", "tuner.run.profile",
            "tuner.search.memory", "tuner.search.model", "tuner.search.levers",
            "tuner.search.budget", "tuner.cli", "tuner.setup", "launchers.registry",
            "tuner.decide.environment", "tuner.output.broken", "tuner.run.lock",
            "tuner.run.multinode", "tuner.run.node_server", "tuner.record.experiment")
# Over 400 lines, and why (none today).
LONG_MODULES: dict[str, str] = {}


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(path: Path, name: str) -> Iterator[tuple[str, bool]]:
    """(module, at module level?) for every import in the file, resolved to full names;
    ``from pkg import name`` gives both ``pkg.name`` and ``pkg`` (``graph`` keeps the one
    that is a module)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}", id(node) in top_level
                yield base, id(node) in top_level


def graph(level_only: bool = False,
          packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    known = modules(packages)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        targets = list(imported(path, name))
        submodules = {t for t, _ in targets if t in known}
        for target, top in targets:
            if level_only and not top:
                continue
            # ``from pkg import mod`` depends on pkg.mod, not on pkg/__init__.py
            if any(t.startswith(target + ".") for t in submodules):
                continue
            if target in known and target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


# The floors of ARCHITECTURE.md: a module imports only modules of its floor or below
# (search/ and decide/ share a floor and never import each other). SGLang's release rules
# (launchers/sglang/release, pure, importing nothing of servetune) sit on the lowest floor:
# search_spaces/ and the proxy read them.
FLOORS = (("search_spaces", "launchers.sglang.release"), ("launchers",),
          ("tuner.spec", "tuner.setup", "tuner.stats", "tuner.limits", "tuner.weights",
           "tuner.record"),
          ("tuner.output",), ("tuner.search", "tuner.decide"), ("tuner.run",),
          ("tuner.cli", "tuner.__main__"), ("simulator",))
# The simulator is a product package above every room (no module of tuner/, launchers/ or
# search_spaces/ imports it); only ``simulator.runs`` (servetune run as a user runs it) uses
# the engine: the stand-in itself is a model of SGLang over the knob catalogue alone.
STAND_IN_IMPORTS = ("search_spaces", "simulator")


def floor_of(module: str) -> tuple[int, str]:
    best = (-1, "")
    for level, rooms in enumerate(FLOORS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and len(room) > len(best[1]):
                best = (level, room)
    return best


def test_rooms_import_only_their_floor_and_below() -> None:
    upward = []
    for source, targets in graph().items():
        level, room = floor_of(source)
        for target in targets:
            t_level, t_room = floor_of(target)
            if t_level > level or (t_level == level and t_room != room and level == 4):
                upward.append(f"{source} -> {target}")
    assert sorted(upward) == []


def test_the_stand_in_imports_no_engine_module() -> None:
    wrong = sorted(f"{source} -> {target}" for source, targets in graph().items()
                   if source.startswith("simulator.") and source != "simulator.runs"
                   for target in targets
                   if not any(target == p or target.startswith(p + ".")
                              for p in STAND_IN_IMPORTS))
    assert wrong == []


def test_benchmarks_import_nothing_of_tests() -> None:
    """benchmarks/ uses the simulator, a product package, never the test suite's helpers."""
    targets = {(path.relative_to(ROOT), target)
               for path in (ROOT / "benchmarks").rglob("*.py")
               for target, _ in imported(path, ".".join(
                   path.relative_to(ROOT).with_suffix("").parts))}
    assert any(t.startswith("simulator.") for _, t in targets)  # the scan sees imports
    assert sorted(f"{path}: {t}" for path, t in targets
                  if t == "tests" or t.startswith("tests.")) == []


def test_no_import_circle() -> None:
    assert cycles(graph()) == []
    assert cycles(graph(packages=(*PACKAGES, "benchmarks"))) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_ray_is_imported_only_where_trials_run() -> None:
    offenders = sorted(name for name, path in modules().items()
                       if any(t == "ray" or t.startswith("ray.") for t, _ in imported(path, name))
                       and name not in RAY_MODULES)
    assert offenders == []


def test_read_only_modules_reach_no_ray_module_at_import() -> None:
    edges = graph(level_only=True)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    assert {m: sorted(reach(m) & RAY_MODULES) for m in RAY_FREE
            if reach(m) & RAY_MODULES} == {}


def test_importing_the_read_only_modules_does_not_import_ray() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in RAY_FREE)
            + "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_no_private_ray_attribute() -> None:
    """Only Ray's public API: no ``._name`` reached through a Ray object (a Tuner, a
    ResultGrid, an experiment analysis)."""
    private = re.compile(r"\b(grid|tuner|results?|analysis|trial|searcher)\._[a-z]\w*")
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in modules().values()
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if private.search(line) and "self._" not in line]
    assert hits == []
    ray_private = re.compile(r"\bray\.[\w.]*\._")
    assert [str(p) for p in modules().values() if ray_private.search(p.read_text())] == []


def test_modules_stay_small() -> None:
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > 400 and name not in LONG_MODULES}
    assert long == {}


def test_ray_is_pinned_to_the_tested_range() -> None:
    """Ray 2.60 is what the suite and the GPU runs used; a new minor release is tried first."""
    assert '"ray[tune,default]>=2.60,<2.61"' in (ROOT / "pyproject.toml").read_text()
