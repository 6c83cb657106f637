"""Shared pieces of the benchmark scripts: the machine line, the stand-in command, stats."""

from __future__ import annotations

import os
import platform
import re
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = (sys.executable, "-m", "simulator.sglang_server")
READY_RE = re.compile(r"^FAKE_READY_AT (\d+\.\d+)$", re.MULTILINE)


def machine() -> str:
    """One line naming the machine the figures come from."""
    mem = psutil.virtual_memory().total / 2**30
    return (f"machine: {psutil.cpu_count(logical=True)} CPU cores, {mem:.0f} GiB, "
            f"Python {platform.python_version()}, {platform.system()} {platform.machine()}")


def with_root_on_path() -> None:
    """Processes started from here (Ray workers, the stand-in) import ``simulator``."""
    parts = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def exit_on_sigterm() -> None:
    """SIGTERM ends a benchmark as Ctrl-C does (SystemExit, so ``finally`` blocks and the
    runner's own stop run): a benchmark killed mid-run leaves no servetune run behind."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def gpu_ids(ranks: int, device: str) -> tuple[str, ...]:
    """The first ``ranks`` GPUs visible to this process (none for ``--device cpu``)."""
    if device == "cpu":
        return ()
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([v.strip() for v in visible.split(",") if v.strip()] if visible is not None
           else [str(i) for i in range(torch.cuda.device_count())])
    if len(ids) < ranks:
        raise SystemExit(f"--ranks {ranks}: only {len(ids)} GPU(s) visible")
    return tuple(ids[:ranks])


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """median [min, max] of ``values`` in seconds."""
    if not values:
        return "n/a"
    return f"{median(values):.3f} s [min {min(values):.3f}, max {max(values):.3f}]"


def start_stand_in(folder: Path, trial_id: str, server_args: Sequence[str] = (),
                   experiment: str = "bench") -> Any:
    """The SGLang stand-in started as servetune starts a server (plan -> start), on a free
    port, logging into ``folder/trial_id``; returns the running workload (SGLangRunning)."""
    from launchers.base import TrialContext
    from launchers.process import free_port
    from launchers.sglang.launcher import SGLangArgs, SGLangWorkload

    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    workload = SGLangWorkload(SGLangArgs(model=str(model), server_cmd=list(STAND_IN),
                                         speculative_algorithm="EAGLE3",
                                         server_args=list(server_args), port=0))
    ctx = TrialContext(experiment, trial_id, folder / trial_id,
                       tuple(str(g) for g in range(8)), free_port())
    plan = workload.plan({}, ctx)
    return workload.start(plan, ctx)


def ready_moment(log_path: Path, timeout: float = 5.0) -> float:
    """The stand-in's own ready moment: the time.time() it logs as ``FAKE_READY_AT``."""
    deadline = time.monotonic() + timeout
    while True:
        match = READY_RE.search(log_path.read_text(errors="replace"))
        if match:
            return float(match.group(1))
        if time.monotonic() > deadline:
            raise RuntimeError(f"no FAKE_READY_AT in {log_path}")
        time.sleep(0.01)
