"""Does the proxy rank communication settings as the real server does? The same settings
(allreduce backend x a few NCCL settings, SGLang's default included) measured on the proxy in
native mode and on real SGLang at TP 2 with dummy weights, a Llama model of a few layers with
Llama-3.1-70B's hidden size (so that communication is a visible share of the pass), EAGLE3 with
a one-layer draft of the same width: Spearman's rank correlation of verify ms, and whether the
proxy's winner is the server's.

Needs 2 GPUs and SGLang with its kernels (shared/tools/device-sglang-prepare); run from the
repository root with SGLang on PYTHONPATH. Each step appends to DIR/rows.jsonl and skips what
is there, so that a step cut short (10 minutes a device call) resumes:

    python -m benchmarks.proxy_vs_server prepare --out DIR   # the model folders (no weights;
                                                             # here, then carry DIR)
    python -m benchmarks.proxy_vs_server measure --side proxy --out DIR
    python -m benchmarks.proxy_vs_server measure --side server --out DIR [--settings a,b]
    python -m benchmarks.proxy_vs_server compare --out DIR   # the verdict, last line

The settings (``SETTINGS``): backends default / custom-v1 / nccl / pcie-ipc, each with no NCCL
variable, NCCL_PROTO=Simple and NCCL_ALGO=allreduce:tree: 12. The server's verify ms is SGLang's
own (``target_verify`` device time per pass, /metrics); the proxy's its captured pass with the
same shape (batch = concurrency, draft tokens = steps + 1, KV length = prompt + output).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

ROWS = "rows.jsonl"
TARGET, DRAFT = "target", "draft"
ROOT = Path(__file__).resolve().parents[1]
# the tiny tokenizer (8192 ids): shared/ inside the checkout, or beside it
TOKENIZERS = (ROOT / "shared/data/tiny-llama", ROOT.parent / "shared/data/tiny-llama")
BACKENDS: tuple[str | None, ...] = (None, "custom-v1", "nccl", "pcie-ipc")
NCCL_SETTINGS: tuple[dict[str, str], ...] = (
    {}, {"NCCL_PROTO": "Simple"}, {"NCCL_ALGO": "allreduce:tree"})
STEPS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 3, 4, 256, 128
SERVER_ARGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
               "--cuda-graph-backend-prefill", "disabled", "--skip-server-warmup",
               "--speculative-num-steps", str(STEPS), "--speculative-eagle-topk", "1",
               "--speculative-num-draft-tokens", str(STEPS + 1),
               "--mem-fraction-static", "0.7"]
# Llama-3.1-70B's widths, 4 layers, the tiny tokenizer's vocabulary (8192 ids)
LLAMA70B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 4096,
            "rope_theta": 500000.0, "vocab_size": 8192, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 3, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
            "attention_bias": False, "mlp_bias": False}


def label(config: Mapping[str, Any]) -> str:
    """A setting's stable name: its knobs, sorted (``default`` for none)."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "default"


def settings() -> list[dict[str, Any]]:
    """Every backend with every NCCL setting: the default (no knob) first."""
    out = []
    for backend in BACKENDS:
        for nccl in NCCL_SETTINGS:
            out.append({**({"allreduce-backend": backend} if backend else {}), **nccl})
    return out


def write_models(out: Path, layers: int = 4, tokenizer: Path | None = None
                 ) -> tuple[Path, Path]:
    """The target and EAGLE3 draft folders: config.json and the tiny tokenizer, no weights.
    Small: write them here and carry them to the GPU machine (``../shared`` does not travel)."""
    tokenizer = tokenizer or next((t for t in TOKENIZERS if t.exists()), TOKENIZERS[0])
    if not (tokenizer / "tokenizer.json").exists():
        raise SystemExit(f"no tokenizer.json in {tokenizer}: pass --tokenizer")
    folders = (out / TARGET, out / DRAFT)
    configs = ({**LLAMA70B, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers},
               {**LLAMA70B, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                "draft_vocab_size": LLAMA70B["vocab_size"],
                "target_hidden_size": LLAMA70B["hidden_size"]})
    for folder, config in zip(folders, configs, strict=True):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copyfile(tokenizer / name, folder / name)
    return folders


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verdict(rows: Sequence[Mapping[str, Any]], metric: str = "verify_ms") -> dict[str, Any]:
    """Proxy vs server over the settings both measured without failure (the median of each
    side's rows): Spearman's rho of ``metric`` (Pearson on average ranks, ties shared), each
    side's winner (lowest), and whether they agree; the server's rank of the proxy's winner."""
    table = pd.DataFrame([r for r in rows if r.get(metric) is not None and "failure" not in r])
    if table.empty:
        return {"n": 0, "spearman": None, "winners_agree": None}
    wide = table.pivot_table(index="setting", columns="side", values=metric, aggfunc="median")
    wide = wide.dropna(subset=[c for c in ("proxy", "server") if c in wide]).reindex(
        columns=["proxy", "server"])
    wide = wide.dropna()
    n = len(wide)
    rho = float(wide["proxy"].rank().corr(wide["server"].rank())) if n >= 3 else None
    if rho is not None and rho != rho:  # a side with no spread: undefined
        rho = None
    out: dict[str, Any] = {"n": n, "spearman": rho, "metric": metric,
                           "settings": wide.index.tolist(), "proxy": wide["proxy"].tolist(),
                           "server": wide["server"].tolist()}
    if n:
        proxy_best, server_best = wide["proxy"].idxmin(), wide["server"].idxmin()
        server_rank = wide["server"].rank(method="min")
        out.update(proxy_winner=proxy_best, server_winner=server_best,
                   winners_agree=proxy_best == server_best,
                   server_rank_of_proxy_winner=int(server_rank[proxy_best]),
                   server_loss_pct=100.0 * (wide["server"][proxy_best] / wide["server"].min() - 1))
    return out


def verdict_text(v: Mapping[str, Any], threshold: float = 0.8) -> str:
    if v.get("spearman") is None:
        return f"proxy vs server over {v['n']} settings: too few (or no spread) for a verdict"
    trusted = v["spearman"] >= threshold and v["winners_agree"]
    return (f"proxy vs server: Spearman {v['spearman']:.2f} over n={v['n']} settings; proxy "
            f"winner {v['proxy_winner']!r} is the server's #{v['server_rank_of_proxy_winner']} "
            f"({v['server_loss_pct']:+.1f}% verify ms); winners "
            f"{'agree' if v['winners_agree'] else 'differ'}: "
            + ("the proxy ranks as the server does" if trusted else
               f"below the bar (rho >= {threshold} and the same winner)"))


# ---------------------------------------------------------------- measuring (GPUs)


def measure_one(side: str, config: dict[str, Any], args: argparse.Namespace,
                experiment: str) -> dict[str, Any]:
    from benchmarks._common import gpu_ids
    from launchers.base import TrialContext
    from launchers.failures import TrialFailed
    from launchers.process import free_port
    from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
    from launchers.sglang.launcher import SGLangArgs

    target, draft = (args.out / TARGET).absolute(), (args.out / DRAFT).absolute()
    if side == "proxy":
        workload: Any = ProxyWorkload(ProxyArgs(
            model=str(target / "config.json"), device="cuda", ranks=2, batch=CONCURRENCY,
            draft_tokens=STEPS + 1, kv_len=INPUT_LEN + OUTPUT_LEN, proxy_comm=args.proxy_comm,
            iters_per_round=args.iters))
        trial_config = dict(config)
    else:
        workload = SGLangArgs(model=str(target), draft_model=str(draft), tp=2,
                              speculative_algorithm="EAGLE3", server_args=SERVER_ARGS,
                              server_cmd=args.server_cmd.split(), dataset="random",
                              input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                              concurrency=[CONCURRENCY], ready_timeout=args.ready_timeout
                              ).build()
        trial_config = {**config, "weights": "dummy"}
    name = label(config)
    trial = f"{side}-{len(read_rows(args.out / ROWS))}"
    ctx = TrialContext(experiment, trial, (args.out / "trials" / trial).absolute(),
                       gpu_ids(2, "cuda"), port=free_port())
    row: dict[str, Any] = {"side": side, "setting": name, "config": config}
    began = time.monotonic()
    try:
        plan = workload.plan(trial_config, ctx)
        workload.preflight(plan, ctx)
        with workload.start(plan, ctx) as running:
            row["ready_s"] = round(running.wait_ready(args.ready_timeout), 1)
            running.warmup()
            rounds = [running.measure(i) for i in range(args.rounds)]
            info = dict(getattr(running, "info", {}) or {})
    except TrialFailed as err:
        row.update(failure=err.failure.kind.value, message=err.failure.message[:300])
        return row
    kept = [r for r in rounds[1:] or rounds if r.get("verify_ms") is not None]
    row["verify_ms"] = statistics.median(r["verify_ms"] for r in kept) if kept else None
    row["rounds_verify_ms"] = [r.get("verify_ms") for r in rounds]
    row.update({k: info.get(k) for k in ("allreduce_path", "allreduce_served_by",
                                         "sglang_version", "proxy_comm") if k in info})
    row["wall_s"] = round(time.monotonic() - began, 1)
    return row


def measure(args: argparse.Namespace) -> int:
    from launchers.process import reap_all

    done = {(r["side"], r["setting"]) for r in read_rows(args.out / ROWS) if "failure" not in r}
    wanted = [c for c in settings() if not args.settings or label(c) in args.settings]
    experiment = f"proxy-vs-server-{os.getpid()}"
    deadline = time.monotonic() + args.budget
    try:
        for config in wanted:
            if (args.side, label(config)) in done:
                continue
            if time.monotonic() > deadline:
                print(f"budget of {args.budget:.0f} s spent: run the step again to go on")
                break
            row = measure_one(args.side, config, args, experiment)
            with open(args.out / ROWS, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    finally:
        reap_all(f"{experiment}/")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["prepare", "measure", "compare"])
    p.add_argument("--out", type=Path, default=Path("runs/proxy-vs-server"))
    p.add_argument("--side", choices=["proxy", "server"], default="proxy")
    p.add_argument("--settings", type=lambda t: t.split(";"), help="labels, ';'-separated "
                   "(default: all of SETTINGS not yet measured)")
    p.add_argument("--proxy-comm", choices=["native", "emulated", "auto"], default="native")
    p.add_argument("--layers", type=int, default=4, help="prepare: target layers")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=30, help="proxy: replays per round")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--budget", type=float, default=540.0, help="seconds of measuring per call")
    p.add_argument("--server-cmd", default="sglang serve")
    p.add_argument("--tokenizer", type=Path, help="prepare: a folder with the tiny "
                   "tokenizer's files (default: shared/data/tiny-llama)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "prepare":
        for folder in write_models(args.out, args.layers, args.tokenizer):
            print(f"wrote {folder}")
        return 0
    if args.step == "measure":
        return measure(args)
    v = verdict(read_rows(args.out / ROWS))
    (args.out / "verdict.json").write_text(json.dumps(v, indent=1))
    for name, proxy, server in zip(v.get("settings", []), v.get("proxy", []),
                                   v.get("server", []), strict=True):
        print(f"{name:50} proxy {proxy:8.3f} ms  server {server:8.3f} ms")
    print(verdict_text(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
