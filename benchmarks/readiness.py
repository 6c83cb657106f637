"""Readiness detection latency: the server's ready moment -> servetune's "ready".

The stand-in logs ``FAKE_READY_AT <time.time()>`` the moment it starts answering
``/health_generate`` with 200. servetune starts it the way a trial does (plan -> start) and
``SGLangRunning.wait_ready`` polls until ready; the latency is the time.time() at which
wait_ready returns minus FAKE_READY_AT.

Side by side: SGLang's own test helper, ``_wait_for_server_health`` from the installed
``sglang/test/test_utils.py`` (its source is loaded from that file and run as is: it polls
``/health_generate`` and sleeps 10 s between polls), on the same stand-in.

    python -m benchmarks.readiness [--launches 10] [--helper-launches 3]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import requests

from benchmarks._common import machine, median, ready_moment, spread, start_stand_in, with_root_on_path

Helper = Callable[[subprocess.Popen[bytes], str, Optional[str], float], Any]  # noqa: UP045


def sglang_helper() -> tuple[Helper, str] | None:
    """SGLang's ``_wait_for_server_health``, compiled from the installed file (importing
    sglang.test.test_utils needs SGLang's whole dependency set), and the file's path."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_utils.py"
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    found: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                             and n.name == "_wait_for_server_health"]
    if not found:
        return None
    module = ast.Module(body=found, type_ignores=[])
    namespace: dict[str, Any] = {"time": time, "requests": requests, "subprocess": subprocess,
                                 "Optional": Optional, "Tuple": tuple}
    exec(compile(module, str(path), "exec"), namespace)
    helper: Helper = namespace["_wait_for_server_health"]
    return helper, str(path)


def servetune_latency(folder: Path, index: int) -> float:
    running = start_stand_in(folder, f"st{index:03d}")
    with running:
        running.wait_ready(60.0)
        detected = time.time()
    return detected - ready_moment(running.process.log_path)


def helper_latency(folder: Path, index: int, helper: Helper) -> float:
    running = start_stand_in(folder, f"sg{index:03d}")
    with running:
        ok, error = helper(running.process.popen, running.base_url, None, 60.0)
        detected = time.time()
        if not ok:
            raise RuntimeError(f"SGLang's helper: {error}")
    return detected - ready_moment(running.process.log_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--helper-launches", type=int, default=3,
                        help="launches waited for by SGLang's helper (0: skip it)")
    args = parser.parse_args(argv)
    with_root_on_path()
    print(machine())
    folder = Path(tempfile.mkdtemp(prefix="st-readiness-"))
    try:
        ours = [servetune_latency(folder, i) for i in range(args.launches)]
        print(f"servetune wait_ready, {len(ours)} launches: {spread(ours)}")
        theirs: list[float] = []
        found = sglang_helper() if args.helper_launches else None
        if found is not None:
            helper, path = found
            theirs = [helper_latency(folder, i, helper) for i in range(args.helper_launches)]
            print(f"SGLang _wait_for_server_health ({path}), {len(theirs)} launches: "
                  f"{spread(theirs)}")
        else:
            print("SGLang's helper: not run (--helper-launches 0 or sglang not installed)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if theirs:
        ratio = median(theirs) / max(median(ours), 1e-3)
        tail = f"SGLang's helper: {median(theirs):.2f} s, {ratio:.0f}x"
    else:
        tail = "SGLang's helper: not run"
    print(f"readiness detection: {median(ours):.3f} s after the server is ready ({tail})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
