"""benchmarks/serve_check.py compares a server's /server_info with the decision best.json
holds: the speculative algorithm (none where the decision serves without it) and the shape as
the decided trial's server resolved it."""

from __future__ import annotations

from benchmarks.serve_check import _host, _port, mismatches

ARGV = ["sglang", "serve", "--model-path", "m", "--speculative-algorithm", "EAGLE3"]
INFO = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 1,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}


def test_the_resolved_shape_and_the_algorithm_must_match() -> None:
    best = {"argv": ARGV, "served_config": {"--speculative-num-steps": 1,
                                            "--speculative-eagle-topk": 1,
                                            "--speculative-num-draft-tokens": 2}}
    assert mismatches(best, INFO) == []
    wrong = {**best, "served_config": {**best["served_config"], "--speculative-num-steps": 5}}
    assert mismatches(wrong, INFO) == ["speculative_num_steps: decided 5, server 1"]
    off = {"argv": ARGV[:4], "served_config": {"--speculative-num-steps": None}}
    assert mismatches(off, {"speculative_algorithm": None}) == []
    assert mismatches(off, INFO) == ["speculative_algorithm: launch.sh None, server 'EAGLE3'"]


def test_the_port_and_host_are_the_scripts_or_sglangs_defaults() -> None:
    assert (_port(ARGV), _host(ARGV)) == (30000, "127.0.0.1")
    assert _port([*ARGV, "--port", "31000"]) == 31000 and _port(["--port=31001"]) == 31001
    assert _host(["--host", "0.0.0.0"]) == "0.0.0.0"
