"""benchmarks/proxy_vs_server.py's parts that run without GPUs: the settings, the verdict
(Spearman's rho of verify ms, the winners), the model folders, and both sides' plans (the
server's checked by the installed SGLang's own parser)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import proxy_vs_server as pvs
from launchers.base import TrialContext
from launchers.process import free_port
from launchers.proxy.geometry import Geometry
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from launchers.proxy.shapes import Shape, load_shape
from launchers.sglang.launcher import SGLangArgs


def rows(side: str, times: dict[str, float]) -> list[dict[str, Any]]:
    return [{"side": side, "setting": k, "verify_ms": v} for k, v in times.items()]


def test_twelve_settings_default_first() -> None:
    found = pvs.settings()
    labels = [pvs.label(c) for c in found]
    assert len(found) >= 12 and len(set(labels)) == len(labels)
    assert found[0] == {} and labels[0] == "default"
    assert {"allreduce-backend": "nccl", "NCCL_PROTO": "Simple"} in found
    assert pvs.label({"NCCL_PROTO": "LL", "allreduce-backend": "nccl"}) == \
        "NCCL_PROTO=LL,allreduce-backend=nccl"


def test_verdict_rank_correlation_and_winners() -> None:
    proxy = rows("proxy", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    same = pvs.verdict(proxy + rows("server", {"a": 10.0, "b": 30.0, "c": 20.0, "d": 40.0}))
    assert same["n"] == 4 and same["spearman"] == pytest.approx(0.8)  # one swap of 4
    assert same["winners_agree"] is True and same["proxy_winner"] == "a"
    assert same["server_rank_of_proxy_winner"] == 1 and same["server_loss_pct"] == 0.0
    reverse = pvs.verdict(proxy + rows("server", {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}))
    assert reverse["spearman"] == pytest.approx(-1.0) and reverse["winners_agree"] is False
    assert reverse["server_winner"] == "d" and reverse["server_rank_of_proxy_winner"] == 4
    assert reverse["server_loss_pct"] == pytest.approx(300.0)
    text = pvs.verdict_text(reverse)
    assert text.startswith("proxy vs server: Spearman -1.00 over n=4 settings;")
    assert "winners differ" in text and "below the bar" in text
    assert "the proxy ranks as the server does" in pvs.verdict_text(
        pvs.verdict(proxy + rows("server", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 5.0})))


def test_verdict_uses_only_settings_both_sides_measured() -> None:
    measured = (rows("proxy", {"a": 1.0, "b": 2.0, "c": 3.0, "e": 0.1})
                + rows("server", {"a": 1.0, "b": 2.0, "c": 3.0})
                + [{"side": "server", "setting": "e", "failure": "crashed"},
                   {"side": "proxy", "setting": "a", "verify_ms": 9.0},  # a repeat: medians
                   {"side": "proxy", "setting": "a", "verify_ms": 0.5},
                   {"side": "server", "setting": "z", "verify_ms": None}])
    v = pvs.verdict(measured)
    assert v["settings"] == ["a", "b", "c"] and v["proxy"][0] == 1.0
    assert v["spearman"] == pytest.approx(1.0)
    tied = pvs.verdict(rows("proxy", {"a": 1.0, "b": 1.0, "c": 1.0})
                       + rows("server", {"a": 1.0, "b": 2.0, "c": 3.0}))
    assert tied["spearman"] is None  # no spread on one side: no correlation
    assert "too few" in pvs.verdict_text(tied)
    assert pvs.verdict([])["n"] == 0


def test_models_and_both_plans(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (tokenizer / name).write_text("{}")
    target, draft = pvs.write_models(tmp_path / "m", layers=4, tokenizer=tokenizer)
    config = json.loads((target / "config.json").read_text())
    assert config["hidden_size"] == 8192 and config["num_hidden_layers"] == 4
    assert json.loads((draft / "config.json").read_text())["architectures"] == \
        ["LlamaForCausalLMEagle3"]
    shape = Shape.from_config(load_shape(str(target / "config.json")), "target")
    Geometry(shape, ranks=2, batch=pvs.CONCURRENCY, draft_tokens=pvs.STEPS + 1)  # splits
    ctx = TrialContext("pvs", "t0", tmp_path / "trials" / "t0", ("0", "1"), port=free_port())
    setting = {"allreduce-backend": "nccl", "NCCL_PROTO": "Simple"}
    server = SGLangArgs(model=str(target), draft_model=str(draft), tp=2,
                        speculative_algorithm="EAGLE3", server_args=pvs.SERVER_ARGS,
                        server_cmd=[sys.executable, "-m", "sglang.launch_server"],
                        dataset="random", input_len=pvs.INPUT_LEN, output_len=pvs.OUTPUT_LEN,
                        concurrency=[pvs.CONCURRENCY]).build()
    plan = server.plan({**setting, "weights": "dummy"}, ctx)
    argv = " ".join(plan.argv)
    assert "--load-format dummy" in argv and "--disable-custom-all-reduce" in argv
    assert plan.env["NCCL_PROTO"] == "Simple"
    assert server.preflight(plan, ctx) is not None  # SGLang's own parser accepts the command
    proxy = ProxyWorkload(ProxyArgs(model=str(target / "config.json"), device="cpu", ranks=2,
                                    batch=pvs.CONCURRENCY, draft_tokens=pvs.STEPS + 1,
                                    proxy_comm="emulated")).plan(setting, ctx)
    assert proxy.env["NCCL_PROTO"] == "Simple"
    assert proxy.argv[proxy.argv.index("--batch") + 1] == str(pvs.CONCURRENCY)
