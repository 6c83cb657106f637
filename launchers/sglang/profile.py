"""Profile a running SGLang server with its own profiler (shared/reference/sglang.md).

``POST /start_profile`` with ``output_dir``, ``num_steps`` and ``activities`` starts
torch.profiler in every scheduler (rank); a bench round then makes the steps happen. With
``num_steps`` SGLang stops by itself after that many forward steps (read in SGLang 0.5.23:
``srt/managers/scheduler_components/profiler_manager.py``) and each rank exports
``<profile_id>-TP-<rank>.trace.json.gz``; ``POST /stop_profile`` afterwards stops a profile that
saw fewer steps (it answers an error when the profile already stopped, which is fine). Stacks
and shapes are turned off: they make the traces many times larger and are not read here.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from pathlib import Path

import requests

from launchers.trace.events import StepSpans

ACTIVITIES = ("CPU", "GPU")
# SGLang's step spans: ``step[VERIFY bs=N]``, ``step[DRAFT bs=N]``, any ``step[STAGE bs=N ...]``
# (0.5.23). 0.5.16 names a span by its forward mode: ``step[TARGET_VERIFY bs=N]`` is the
# verify step (its draft model's steps carry no step span; seen in an H200 trace).
STEP_SPANS = StepSpans(re.compile(r"^step\[(?P<stage>[A-Za-z_]+) bs=(?P<bs>\d+)"),
                       aliases=(("target_verify", "verify"),))


class ProfileError(Exception):
    """The server refused to profile, or wrote no traces in time."""


def _post(url: str, body: dict[str, object] | None, timeout: float) -> requests.Response:
    try:
        return requests.post(url, json=body, timeout=timeout)
    except requests.RequestException as err:
        raise ProfileError(f"{url}: {err}") from None


def capture(base_url: str, out_dir: Path, steps: int, ranks: int,
            run_round: Callable[[], object], *, timeout: float = 300.0,
            profile_id: str | None = None) -> list[Path]:
    """Profile ``steps`` forward steps while ``run_round`` runs; return one trace per rank."""
    out_dir = out_dir.absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    profile_id = profile_id or f"servetune-{time.time_ns()}"
    body: dict[str, object] = {"output_dir": str(out_dir), "num_steps": steps,
                               "activities": list(ACTIVITIES), "with_stack": False,
                               "record_shapes": False, "profile_id": profile_id}
    resp = _post(base_url + "/start_profile", body, 60.0)
    if resp.status_code != 200:
        raise ProfileError(f"/start_profile answered {resp.status_code}: {resp.text[:300]}")
    try:
        run_round()
    finally:
        # the usual answer is an error: the profile stopped itself after num_steps
        with contextlib.suppress(ProfileError):
            _post(base_url + "/stop_profile", None, timeout)
    return wait_for_traces(out_dir, profile_id, ranks, timeout)


def wait_for_traces(folder: Path, profile_id: str, ranks: int, timeout: float,
                    settle: float = 1.0) -> list[Path]:
    """The ``ranks`` trace files of ``profile_id`` once their sizes stop changing."""
    deadline = time.monotonic() + timeout
    last: dict[Path, int] = {}
    while True:
        found = sorted(p for p in folder.glob(f"*{profile_id}*.trace.json*")
                       if not p.name.startswith("merged-"))
        sizes = {p: p.stat().st_size for p in found}
        if len(found) >= ranks and sizes == last and all(sizes.values()):
            return found
        last = sizes
        if time.monotonic() > deadline:
            raise ProfileError(f"{len(found)} of {ranks} trace files of {profile_id} in "
                               f"{folder} after {timeout:.0f} s")
        time.sleep(settle)
