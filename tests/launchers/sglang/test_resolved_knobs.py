"""SGLang's resolved arguments as knob values (resolved.knob_values), read by the search to
complete a suggestion SGLang refuses alone with the baseline's partners."""

from __future__ import annotations

from launchers.sglang import resolved
from launchers.sglang.preflight import Resolution


def test_resolved_fields_become_flag_knob_values() -> None:
    fields = {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
              "mem_fraction_static": 0.85, "disable_cuda_graph": False,
              "cuda_graph_bs": [1, 2, 4], "speculative_algorithm": "EAGLE3",
              "chunked_prefill_size": None, "port": 30000}
    values = resolved.knob_values(Resolution(ok=True, resolved=fields))
    assert values == {"--speculative-num-steps": 5, "--speculative-eagle-topk": 4,
                      "--mem-fraction-static": "0.85", "--disable-cuda-graph": False,
                      "--speculative-algorithm": "EAGLE3"}  # per launch (port) left out


def test_nothing_is_known_where_sglang_refused_or_could_not_resolve() -> None:
    assert resolved.knob_values(None) is None
    assert resolved.knob_values(Resolution(ok=False, error="AssertionError")) is None
    assert resolved.knob_values(Resolution(ok=None)) is None
