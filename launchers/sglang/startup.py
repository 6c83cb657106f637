"""Time to ready, split by SGLang's own log lines: launch -> weights loaded -> graphs captured
-> ready.

SGLang 0.5.23 logs, on each TP rank (``[<time> TP<n>] ...``; rank 0 is read):
- ``Load weight end. elapsed=<s> s, type=...`` after a model's weights are in place
  (srt/model_executor/model_runner.py ``load_model``; the draft model logs its own), or
  ``Load weight end. Committed real weights after CUDA graph capture in <s> s`` when weights
  are committed after capture (model_runner_components/startup_weight_load.py);
- ``Capture <role> <phase> CUDA graph end. [bs=[...], ]elapsed=<s> s, ...`` after each
  graph capture (model_runner_components/cuda_graph_setup.py, speculative/eagle_worker_v2.py);
- ``The server is fired up and ready to roll!`` once warm-up is done
  (srt/entrypoints/http_server.py).

Before any GPU work, a start is mostly Python imports (real-sglang.md: ~38 s of 58 s on the
H200): the launching process logs ``server_args=ServerArgs(...)`` once it has imported SGLang
(``startup_imported_at_s``), its scheduler process logs ``Init torch distributed begin.`` once
it has imported SGLang again (``startup_scheduler_at_s``), and ``Load weight begin.`` starts
the weights (``startup_load_begin_at_s``).

Milestones (``*_at_s``) are seconds from launch to the LAST such line of each kind, read from
the lines' timestamps: to the millisecond with ``SGLANG_LOG_MS=1`` (the launcher sets it),
else to the second. Durations (``startup_weights_s``, ``startup_graphs_s``) add up SGLang's
own ``elapsed=`` figures. A figure the log does not show is None.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping

from launchers.sglang.release.logs import LINE as _LINE
from launchers.sglang.release.logs import READY as _READY

STARTUP_KEYS = ("startup_imported_at_s", "startup_scheduler_at_s", "startup_load_begin_at_s",
                "startup_weights_at_s", "startup_graphs_at_s", "startup_ready_at_s",
                "startup_weights_s", "startup_graphs_s")
# Milestones whose FIRST line counts (the launching process, then the scheduler's).
_FIRST = (("startup_imported_at_s", re.compile(r"^server_args=")),
          ("startup_scheduler_at_s", re.compile(r"^Init torch distributed begin\.")),
          ("startup_load_begin_at_s", re.compile(r"^Load weight begin\.")))

_WEIGHTS = re.compile(r"^Load weight end\.")
_CAPTURE = re.compile(r"^Capture [^.:]*\bend\.")
_ELAPSED = re.compile(r"(?:elapsed=| in )(\d+(?:\.\d+)?) s\b")


def _rank_zero(tags: str) -> bool:
    """Rank-0 lines, or lines of the launching process (no rank tag)."""
    ranks = [t for t in tags.split() if t.startswith("TP")]
    return all(t == "TP0" for t in ranks)


def _epoch(stamp: str, fraction: str | None) -> float:
    seconds = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))  # local time, as logged
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def parse(lines: Iterable[str], launched: float) -> dict[str, float | None]:
    """The startup split from a server log (read up to the ready line); ``launched``: the
    spawn's wall-clock time."""
    out: dict[str, float | None] = dict.fromkeys(STARTUP_KEYS)
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None or not _rank_zero(match.group(3)):
            continue
        message = match.group(4)
        first = next((key for key, pattern in _FIRST if pattern.match(message)), None)
        if first is not None:
            if out[first] is None:
                out[first] = max(0.0, _epoch(match.group(1), match.group(2)) - launched)
            continue
        if _WEIGHTS.match(message):
            at, total = "startup_weights_at_s", "startup_weights_s"
        elif _CAPTURE.match(message):
            at, total = "startup_graphs_at_s", "startup_graphs_s"
        elif message.startswith(_READY):
            at, total = "startup_ready_at_s", None
        else:
            continue
        out[at] = max(0.0, _epoch(match.group(1), match.group(2)) - launched)
        elapsed = _ELAPSED.search(message) if total else None
        if total and elapsed:
            out[total] = (out[total] or 0.0) + float(elapsed.group(1))
        if total is None:
            break  # ready: nothing later belongs to startup
    return out


# ---------------------------------------------------------------- what a trial's start skips

# Metrics of the decode phase alone: the prefill's CUDA graphs never run while they are
# measured (the verify pass and the draft have graphs of their own).
DECODE_PHASE = re.compile(r"^(verify_ms|draft_ms|cycle_ms|(mean|median|p99)_(itl|tpot)_ms|"
                          r"(verify_|server_)?accept_length)(_c\d+)?$")
_OWN_WARMUP = ("--skip-server-warmup", "--warmups")
_PREFILL = ("--cuda-graph-backend-prefill", "--disable-prefill-cuda-graph", "--cuda-graph-config",
            "--disable-cuda-graph", "--cuda-graph-bs-prefill", "--cuda-graph-max-bs-prefill")


def fast_start_flags(on: bool, measured: Iterable[str], server_args: Iterable[str],
                     config: Mapping[str, object]) -> list[str]:
    """Flags that make a trial's server start faster without touching what it measures:
    ``--skip-server-warmup`` (servetune sends its own warm-up requests before any round) and,
    when every measured metric is of the decode phase, ``--cuda-graph-backend-prefill
    disabled`` (real-sglang.md: 58 prefill graphs, 60 s cold, ~14 s warm on the H200). Left
    to the user wherever their server args or the configuration say otherwise."""
    if not on:
        return []
    given = {w.split("=", 1)[0] for w in server_args if w.startswith("--")}
    given |= {k for k, v in config.items() if v is not None}
    flags = [] if given & set(_OWN_WARMUP) else ["--skip-server-warmup"]
    names = list(measured)
    if names and all(DECODE_PHASE.match(n) for n in names) and not given & set(_PREFILL):
        flags += ["--cuda-graph-backend-prefill", "disabled"]
    return flags
