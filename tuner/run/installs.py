"""What servetune and SGLang a machine has installed, and whether every node of a cluster has
the driver's (no Ray here: tuner/run/nodes.py asks each node, tuner/run/cluster.py checks).

servetune ships no code to the nodes (no Ray ``runtime_env``): a trial and each node's agent
import servetune, and each node's server runs its own SGLang, from that node's install. A node
with another servetune would run other code than the driver planned (other flags, other
checks); another SGLang, other kernels and defaults than the driver's parser resolved. So a
run on a cluster first asks every node that can hold a trial and refuses, in one line, a node
whose install differs (``mismatch``). servetune is named by its version and, where it runs
from a git checkout, the checkout's commit (uncommitted edits are not compared); SGLang by its
installed distribution's version.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds tuner/, launchers/


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _commit(root: Path = ROOT) -> str | None:
    """The git commit servetune runs from (None: not a git checkout, or no git)."""
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


@dataclass(frozen=True)
class Install:
    servetune: str | None
    commit: str | None
    sglang: str | None

    @classmethod
    def here(cls) -> Install:
        return cls(_version("servetune"), _commit(), _version("sglang"))

    def words(self) -> str:
        commit = f" (commit {self.commit[:12]})" if self.commit else ""
        return (f"servetune {self.servetune or 'not installed'}{commit} with SGLang "
                f"{self.sglang or 'not installed'}")


def mismatch(driver: Install, nodes: Mapping[str, Install | str]) -> str | None:
    """One line naming the nodes whose install differs from the driver's (a node given as a
    string: why it could not be asked); None when every node has the driver's."""
    differ = {node: got for node, got in nodes.items() if got != driver}
    if not differ:
        return None
    node, got = next(iter(differ.items()))
    what = got if isinstance(got, str) else f"has {got.words()}"
    more = f" (and {len(differ) - 1} more node(s))" if len(differ) > 1 else ""
    return (f"node {node} {what}, the driver {driver.words()}{more}: every node needs the "
            "driver's servetune and SGLang")
