"""The startup split from SGLang 0.5.23's own log lines (texts as its source writes them)."""

from __future__ import annotations

import time

import pytest

from launchers.sglang import startup
from launchers.sglang.startup import STARTUP_KEYS

LAUNCHED = time.mktime(time.strptime("2026-03-01 10:00:00", "%Y-%m-%d %H:%M:%S")) + 0.25


def at(offset_s: float, tags: str = " TP0", ms: bool = True) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(LAUNCHED + offset_s))
    fraction = f".{round((LAUNCHED + offset_s) % 1 * 1000):03d}" if ms else ""
    return f"[{stamp}{fraction}{tags}]"


LOG = [
    f"{at(0.5, '')} server_args=ServerArgs(model_path='m', tp_size=2)",
    f"{at(1.0)} Load weight begin. avail mem=78.50 GB",
    f"{at(1.0, ' TP1')} Load weight begin. avail mem=78.50 GB",
    f"{at(31.0)} Load weight end. elapsed=30.00 s, type=DeepseekV3ForCausalLM, "
    "avail mem=20.10 GB, mem usage=58.40 GB.",
    f"{at(33.0, ' TP1')} Load weight end. elapsed=32.00 s, type=DeepseekV3ForCausalLM, "
    "avail mem=20.10 GB, mem usage=58.40 GB.",
    f"{at(32.0)} Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, "
    "avail mem=10.00 GB",
    f"{at(40.0)} Capture target verify CUDA graph end. bs=[1, 4, 16], elapsed=8.00 s, "
    "mem usage=0.80 GB, avail mem=9.20 GB.",
    f"{at(42.5)} Load weight end. elapsed=2.50 s, type=LlamaForCausalLMEagle3, "
    "avail mem=8.00 GB, mem usage=1.20 GB.",
    f"{at(44.0)} Capture draft decode CUDA graph end. elapsed=1.25 s, mem usage=0.10 GB, "
    "avail mem=7.90 GB.",
    f"{at(45.0)} Capture draft extend CUDA graph end. elapsed=0.75 s, mem usage=0.10 GB, "
    "avail mem=7.80 GB.",
    f"{at(46.0, '')} INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    f"{at(50.0, '')} The server is fired up and ready to roll!",
]


def test_split_from_sglang_lines() -> None:
    split = startup.parse(LOG, LAUNCHED)
    assert set(split) == set(STARTUP_KEYS)
    assert split["startup_weights_at_s"] == pytest.approx(42.5, abs=0.002)  # the draft's, last
    assert split["startup_graphs_at_s"] == pytest.approx(45.0, abs=0.002)
    assert split["startup_ready_at_s"] == pytest.approx(50.0, abs=0.002)
    assert split["startup_weights_s"] == pytest.approx(32.5)  # rank 0: target + draft
    assert split["startup_graphs_s"] == pytest.approx(10.0)


def test_seconds_only_timestamps_and_deferred_weights() -> None:
    log = [f"{at(2.0, ' DP0 TP0 EP0', ms=False)} Capture target decode CUDA graph end. "
           "bs=[1, 2], elapsed=1.50 s, mem usage=0.20 GB, avail mem=9.00 GB.",
           f"{at(9.0, ' DP0 TP0 EP0', ms=False)} Load weight end. Committed real weights after "
           "CUDA graph capture in 6.40 s (capture overlap window 1.00 s, startup overlap total "
           "8.00 s)"]
    split = startup.parse(log, LAUNCHED)
    assert split["startup_graphs_at_s"] == pytest.approx(1.75, abs=1.0)  # to the second
    assert split["startup_weights_at_s"] == pytest.approx(8.75, abs=1.0)
    assert split["startup_weights_s"] == pytest.approx(6.4)
    assert split["startup_ready_at_s"] is None


def test_nothing_logged_is_missing() -> None:
    failed = [f"{at(3.0)} Capture cuda graph failed: CUDA error: out of memory. The end.",
              "Traceback (most recent call last):", "no brackets at all"]
    assert startup.parse(failed, LAUNCHED) == dict.fromkeys(STARTUP_KEYS)
    assert startup.parse([], LAUNCHED) == dict.fromkeys(STARTUP_KEYS)
