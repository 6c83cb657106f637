"""SGLang's ``/metrics`` and ``/server_info`` -> verify ms, draft ms, cycle ms, accept length.

Per shared/reference/sglang.md: with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` and
``--enable-metrics``, ``sglang:forward_execution_seconds_total{category=...}`` holds
CUDA-event time per forward category and ``sglang:cuda_graph_passes_total{mode=...}`` counts
forward passes (+1 per decode batch). Over a measured window,

    verify ms per cycle = 1000 * delta(seconds, category="target_verify") / delta(decode passes)
    draft ms per cycle  = 1000 * delta(seconds, "eagle_draft" + "eagle_draft_extend") / same

Cycle ms comes from ``step_time_dict`` (``SGLANG_RECORD_STEP_TIME=1``): SGLang 0.5.23 appends
one entry per ``--decode-log-interval`` decode batches (default 40) under the running batch
size, the window's wall time / the interval, idle time included
(srt/managers/scheduler_components/metrics_reporter.py ``report_decode_stats``). A round's
cycle ms is read from the entries that appeared during the round only.

The Prometheus text is parsed only with prometheus_client's parser. A value that cannot be
read, or whose counters did not move in the window, is None (missing), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from launchers.stats import percentile  # also imported from here by bench.py

FORWARD_SECONDS = "sglang:forward_execution_seconds"
GRAPH_PASSES = "sglang:cuda_graph_passes"
VERIFY_CATEGORIES = ("target_verify",)
DRAFT_CATEGORIES = ("eagle_draft", "eagle_draft_extend")
STEP_TIME_PERCENTILE = 20.0  # SGLang's own speculative sweep takes the 20th percentile


@dataclass(frozen=True)
class CounterSnapshot:
    """Cumulative counters at one instant. None: the server does not expose the series."""

    verify_s: float | None
    draft_s: float | None
    passes: float | None


@dataclass(frozen=True)
class _Sample:
    labels: dict[str, str]
    value: float


def _base_name(name: str) -> str | None:
    """A sample name without its counter suffix; None for ``_created`` timestamps.

    prometheus_client strips ``_total`` from counter FAMILY names but keeps it on samples,
    and an untyped exposition keeps it everywhere; both spellings land on the same base."""
    if name.endswith("_created"):
        return None
    return name[: -len("_total")] if name.endswith("_total") else name


def _samples(text: str) -> dict[str, list[_Sample]]:
    out: dict[str, list[_Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            base = _base_name(sample.name)
            if base in (FORWARD_SECONDS, GRAPH_PASSES) and not math.isnan(sample.value):
                out.setdefault(base, []).append(_Sample(dict(sample.labels), float(sample.value)))
    return out


def _reference_rank(samples: list[_Sample]) -> list[_Sample]:
    """Keep one tensor-parallel rank: tp_rank "0" when several ranks export.

    TP ranks run the same batches in lockstep, so each rank's counters describe the same
    cycles; adding ranks up would multiply the seconds and the passes alike, and by default
    only rank 0 exports at all (``--enable-metrics-for-all-schedulers`` adds the others).
    Rank 0 is therefore the one rank that is always there. Other labels (model_name,
    engine_type, pp_rank, dp_rank, moe_ep_rank, ...) are not assumed: whatever remains is
    summed, and since numerator and denominator are summed over the same schedulers the
    ratio is the mean per pass."""
    ranks = {s.labels.get("tp_rank") for s in samples}
    if len(ranks) > 1 and "0" in ranks:
        return [s for s in samples if s.labels.get("tp_rank") == "0"]
    return samples


def _total(samples: list[_Sample], label: str, wanted: Iterable[str]) -> float | None:
    keep = set(wanted)
    values = [s.value for s in samples if s.labels.get(label) in keep]
    return sum(values) if values else None


def _passes(samples: list[_Sample]) -> float | None:
    """Decode passes (modes ``decode_cuda_graph`` and ``decode_none``): one per decode batch,
    i.e. one per draft+verify cycle. Prefill passes in the window are left out; a server
    that labels modes otherwise falls back to every mode."""
    if not samples:
        return None
    decode = [s.value for s in samples if s.labels.get("mode", "").startswith("decode")]
    return sum(decode) if decode else sum(s.value for s in samples)


def parse_metrics_text(text: str) -> CounterSnapshot:
    """The counters servetune needs from one ``/metrics`` exposition."""
    found = _samples(text)
    seconds = _reference_rank(found.get(FORWARD_SECONDS, []))
    passes = _reference_rank(found.get(GRAPH_PASSES, []))
    return CounterSnapshot(
        verify_s=_total(seconds, "category", VERIFY_CATEGORIES),
        draft_s=_total(seconds, "category", DRAFT_CATEGORIES),
        passes=_passes(passes),
    )


def scrape(base_url: str, timeout: float = 5.0) -> CounterSnapshot | None:
    """GET ``/metrics``; None when the endpoint cannot be read or parsed."""
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", timeout=timeout)
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    try:
        return parse_metrics_text(resp.text)
    except ValueError:
        return None


def _delta(before: CounterSnapshot | None, after: CounterSnapshot | None,
           field: str) -> float | None:
    if after is None or getattr(after, field) is None:
        return None
    end = float(getattr(after, field))
    start = getattr(before, field) if before is not None else None
    if start is None:
        if before is None:
            return None
        # A labelled counter appears on its first increment: absent before means 0 before.
        start = 0.0
    change = end - float(start)
    return change if change >= 0 else None  # negative: the server restarted in between


def per_cycle(before: CounterSnapshot | None, after: CounterSnapshot | None
              ) -> dict[str, float | None]:
    """Verify and draft ms per cycle over the window between two snapshots.

    None when a counter is absent, no decode pass happened in the window, or its seconds did
    not move while the passes did (a server without speculative decoding runs no
    ``target_verify``: that is no measurement, not 0 ms)."""
    passes = _delta(before, after, "passes")
    out: dict[str, float | None] = {"verify_ms": None, "draft_ms": None}
    if not passes:
        return out
    for key, field in (("verify_ms", "verify_s"), ("draft_ms", "draft_s")):
        seconds = _delta(before, after, field)
        out[key] = 1000.0 * seconds / passes if seconds else None
    return out


def server_info(base_url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """GET ``/server_info`` (``/get_server_info`` on older servers); None if unavailable."""
    for path in ("/server_info", "/get_server_info"):
        try:
            resp = requests.get(base_url.rstrip("/") + path, timeout=timeout)
        except requests.RequestException:
            return None
        if resp.status_code == 404:
            continue
        if resp.status_code != 200:
            return None
        try:
            data = resp.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _state(info: dict[str, Any] | None) -> dict[str, Any]:
    """``internal_states[0]`` of a ``/server_info`` answer ({} when absent)."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        return states[0]
    return {}


def server_accept_length(info: dict[str, Any] | None) -> float | None:
    """``avg_spec_accept_length``: cumulative since start (a cross-check of accept_length)."""
    return _number(_state(info).get("avg_spec_accept_length"))


def _step_times(info: dict[str, Any] | None, batch_size: int) -> list[Any]:
    steps = _state(info).get("step_time_dict")
    if not isinstance(steps, dict):
        return []
    times = steps.get(str(batch_size), steps.get(batch_size))
    return times if isinstance(times, list) else []


def cycle_ms(before: dict[str, Any] | None, after: dict[str, Any] | None,
             batch_size: int) -> float | None:
    """Cycle ms at ``batch_size`` from the step-time windows that closed between two
    ``/server_info`` answers; like SGLang's own speculative sweep, the 20th percentile (a
    window that spans idle time or a prefill is long). None when no window closed, or when
    either answer is missing (the round's windows cannot be told apart)."""
    if before is None or after is None:
        return None
    seen = len(_step_times(before, batch_size))
    window = _step_times(after, batch_size)
    if len(window) < seen:  # the server restarted: not one measurement
        return None
    numbers = [n for n in map(_number, window[seen:]) if n is not None]
    p = percentile(numbers, STEP_TIME_PERCENTILE)
    return None if p is None else 1000.0 * p
