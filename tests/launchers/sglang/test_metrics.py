"""/metrics and /server_info parsing, on SGLang's metric names and labels (sglang.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest

from launchers.process import free_port
from launchers.sglang import metrics
from launchers.sglang.metrics import CounterSnapshot, parse_metrics_text, per_cycle
from simulator.http_stub import serve

LABELS = ('engine_type="unified",model_name="meta-llama/Llama-3.1-70B-Instruct",'
          'moe_ep_rank="0",pp_rank="0"')


def exposition(verify: float, draft: float, extend_draft: float, decode_passes: float,
               prefill_passes: float = 5.0, ranks: tuple[str, ...] = ("0",)) -> str:
    """What SGLang's prometheus_client exposition looks like (counters with _created)."""
    out = [
        "# HELP sglang:forward_execution_seconds_total Total time that GPU is busy executing "
        "model forward passes. Refer to ForwardMode for category labels.",
        "# TYPE sglang:forward_execution_seconds_total counter",
    ]
    for rank in ranks:
        scale = 1.0 + int(rank)  # other ranks differ, so picking the wrong one shows
        out += [
            f'sglang:forward_execution_seconds_total{{category="target_verify",{LABELS},'
            f'tp_rank="{rank}"}} {verify * scale}',
            f'sglang:forward_execution_seconds_total{{category="eagle_draft",{LABELS},'
            f'tp_rank="{rank}"}} {draft * scale}',
            f'sglang:forward_execution_seconds_total{{category="eagle_draft_extend",{LABELS},'
            f'tp_rank="{rank}"}} {extend_draft * scale}',
            f'sglang:forward_execution_seconds_total{{category="extend",{LABELS},'
            f'tp_rank="{rank}"}} 3.5',
            f'sglang:forward_execution_seconds_created{{category="target_verify",{LABELS},'
            f'tp_rank="{rank}"}} 1.7e+09',
        ]
    out += [
        "# HELP sglang:cuda_graph_passes_total Total number of forward passes categorized by "
        "CUDA graph.",
        "# TYPE sglang:cuda_graph_passes_total counter",
    ]
    for rank in ranks:
        scale = 1.0 + int(rank)
        out += [
            f'sglang:cuda_graph_passes_total{{{LABELS},mode="decode_cuda_graph",tp_rank="{rank}"}}'
            f' {decode_passes * scale}',
            f'sglang:cuda_graph_passes_total{{{LABELS},mode="prefill_none",tp_rank="{rank}"}}'
            f' {prefill_passes}',
            f'sglang:cuda_graph_passes_created{{{LABELS},mode="decode_cuda_graph",'
            f'tp_rank="{rank}"}} 1.7e+09',
        ]
    out += [
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
        "# TYPE sglang:spec_accept_length gauge",
        f'sglang:spec_accept_length{{{LABELS},tp_rank="0"}} 3.21',
        "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{{LABELS},le="0.1",tp_rank="0"}} 4.0',
        f'sglang:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf",tp_rank="0"}} 5.0',
        f'sglang:time_to_first_token_seconds_count{{{LABELS},tp_rank="0"}} 5.0',
        f'sglang:time_to_first_token_seconds_sum{{{LABELS},tp_rank="0"}} 0.4',
    ]
    return "\n".join(out) + "\n"


def test_parse_sglang_exposition() -> None:
    snap = parse_metrics_text(exposition(verify=2.0, draft=0.4, extend_draft=0.1,
                                         decode_passes=100))
    assert (snap.verify_s, snap.passes) == (2.0, 100.0)
    assert snap.draft_s == pytest.approx(0.5)


def test_several_tp_ranks_use_rank_zero() -> None:
    text = exposition(verify=2.0, draft=0.4, extend_draft=0.1, decode_passes=100,
                      ranks=("0", "1", "2"))
    snap = parse_metrics_text(text)
    assert snap.verify_s == 2.0 and snap.passes == 100.0


def test_untyped_exposition_with_total_names() -> None:
    text = (f'sglang:forward_execution_seconds_total{{category="target_verify",{LABELS}}} 1.5\n'
            f'sglang:cuda_graph_passes_total{{mode="decode_none",{LABELS}}} 30\n')
    assert parse_metrics_text(text) == CounterSnapshot(verify_s=1.5, draft_s=None, passes=30.0)


def test_absent_series_are_none() -> None:
    text = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 1\n"
    assert parse_metrics_text(text) == CounterSnapshot(None, None, None)


def test_per_cycle_from_deltas() -> None:
    before = CounterSnapshot(verify_s=2.0, draft_s=0.5, passes=100.0)
    after = CounterSnapshot(verify_s=4.5, draft_s=1.0, passes=200.0)
    assert per_cycle(before, after) == {"verify_ms": pytest.approx(25.0),
                                        "draft_ms": pytest.approx(5.0)}


def test_per_cycle_missing_is_none_never_zero() -> None:
    before = CounterSnapshot(verify_s=2.0, draft_s=None, passes=100.0)
    assert per_cycle(before, CounterSnapshot(2.0, None, 100.0)) == {"verify_ms": None,
                                                                     "draft_ms": None}
    grown = per_cycle(before, CounterSnapshot(3.0, None, 150.0))
    assert grown == {"verify_ms": pytest.approx(20.0), "draft_ms": None}
    assert per_cycle(None, CounterSnapshot(3.0, 1.0, 150.0)) == {"verify_ms": None,
                                                                 "draft_ms": None}
    assert per_cycle(before, None) == {"verify_ms": None, "draft_ms": None}
    # a restarted server (counters went down) is not a measurement
    assert per_cycle(before, CounterSnapshot(1.0, None, 10.0))["verify_ms"] is None


def test_counters_that_did_not_move_are_missing_not_zero() -> None:
    """The no-speculative reference: decode passes move, target_verify seconds do not."""
    before = CounterSnapshot(verify_s=0.0, draft_s=0.0, passes=100.0)
    after = CounterSnapshot(verify_s=0.0, draft_s=0.0, passes=180.0)
    assert per_cycle(before, after) == {"verify_ms": None, "draft_ms": None}
    moved = per_cycle(before, CounterSnapshot(verify_s=1.6, draft_s=0.0, passes=180.0))
    assert moved == {"verify_ms": pytest.approx(20.0), "draft_ms": None}


def test_counter_created_inside_the_window_counts_from_zero() -> None:
    before = CounterSnapshot(verify_s=None, draft_s=None, passes=None)
    after = CounterSnapshot(verify_s=0.5, draft_s=0.1, passes=20.0)
    assert per_cycle(before, after) == {"verify_ms": pytest.approx(25.0),
                                        "draft_ms": pytest.approx(5.0)}


def info(steps: dict[str, list[float]], accept: float | None = None) -> dict[str, object]:
    state: dict[str, object] = {"step_time_dict": steps}
    if accept is not None:
        state["avg_spec_accept_length"] = accept
    return {"internal_states": [state]}


def test_cycle_ms_from_the_windows_of_the_round_only() -> None:
    before = info({"1": [0.500, 0.030]})  # an earlier round's windows (one spanned idle time)
    after = info({"1": [0.500, 0.030, 0.030, 0.010, 0.020, 0.040, 0.050], "8": [0.1]})
    assert metrics.cycle_ms(before, after, 1) == pytest.approx(18.0)  # numpy p20 of the 5 new
    assert metrics.cycle_ms(before, after, 8) == pytest.approx(100.0)  # absent before: all new
    assert metrics.cycle_ms(None, after, 8) is None  # which windows are the round's?
    assert metrics.cycle_ms(before, after, 4) is None  # no window at this batch size
    assert metrics.cycle_ms(after, after, 1) is None  # no window closed in the round
    assert metrics.cycle_ms(after, before, 1) is None  # fewer than before: a restart
    assert metrics.cycle_ms(before, None, 1) is None
    assert metrics.cycle_ms({}, {"internal_states": [{}]}, 1) is None


def test_server_accept_length() -> None:
    assert metrics.server_accept_length(info({}, accept=3.2)) == 3.2
    assert metrics.server_accept_length(info({})) is None
    assert metrics.server_accept_length({}) is None and metrics.server_accept_length(None) is None


def test_percentile_matches_numpy_linear() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([7.0], 99) == 7.0
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5
    assert metrics.percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)


# ---------------------------------------------------------------- over HTTP


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        code, body = self.routes.get(self.path, (404, b"{}"))
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"routes": {}})
    with serve(handler) as url:
        yield url, handler


def test_scrape_and_server_info_over_http(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.routes["/metrics"] = (200, exposition(1.0, 0.2, 0.1, 50).encode())
    handler.routes["/get_server_info"] = (200, json.dumps(
        {"internal_states": [{"avg_spec_accept_length": 2.5}]}).encode())
    snap = metrics.scrape(url)
    assert snap is not None and snap.passes == 50.0
    info = metrics.server_info(url)  # /server_info is 404 here: the old alias answers
    assert info is not None and info["internal_states"][0]["avg_spec_accept_length"] == 2.5


def test_unreachable_or_disabled_metrics_give_none(server: tuple[str, type[_Handler]]) -> None:
    url, _ = server
    assert metrics.scrape(url) is None  # 404: --enable-metrics is off
    assert metrics.server_info(url) is None
    closed = f"http://127.0.0.1:{free_port()}"
    assert metrics.scrape(closed, timeout=0.5) is None
    assert metrics.server_info(closed, timeout=0.5) is None
