"""Where a real SGLang server's start and stop go: launch -> ready, split by SGLang's own
log lines, and the stop, for named variants of one command (GPU machine, SGLang installed).

    python -m benchmarks.sglang_startup --model M [--draft D] --out DIR \\
        --variant plain= --variant fast='--cuda-graph-backend-prefill disabled ...' \\
        [--stop term|kill|both] [--repeat N] [--expect-failure NAME]

Each variant is launched (``sglang serve`` with the common flags, then the variant's), timed
to ``/health_generate`` answering, sent one request, and stopped: ``term`` sends SIGTERM to
the server's main process as a user's Ctrl-C or ``kill`` would, ``kill`` stops the tree the
way servetune stops a healthy server (launchers/sglang/stop.py). A variant named in
``--expect-failure`` is expected to die: its log is kept and classified
(launchers/failures.py). Writes DIR/<variant>-<i>.log, DIR/startup.json and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import requests

from benchmarks._common import machine
from launchers.failures import Failure
from launchers.process import ServerProcess, free_port
from launchers.sglang import startup as sglang_startup
from launchers.sglang.running import stop_now

MARKER = "sglang-startup/"


def common_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--model-path", args.model, "--tp-size", "1", "--host", "127.0.0.1",
             "--enable-metrics", *shlex.split(args.flags)]
    if args.draft:
        flags += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                  args.draft]
    return flags


def healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health_generate", timeout=(0.5, 10)).status_code == 200
    except requests.RequestException:
        return False


def one_request(url: str) -> dict[str, Any]:
    body = {"text": "The tensor-parallel group", "sampling_params": {
        "max_new_tokens": 32, "temperature": 0, "ignore_eos": True}}
    resp = requests.post(url + "/generate", json=body, timeout=60)
    meta = resp.json().get("meta_info", {})
    return {k: meta.get(k) for k in ("completion_tokens", "spec_verify_ct")}


def stop_tree(server: ServerProcess, how: str) -> float:
    """Seconds from the stop to every process of the tree gone."""
    began = time.monotonic()
    if how == "term":
        procs = [psutil.Process(server.pid)]
        procs += procs[0].children(recursive=True)
        os.kill(server.pid, signal.SIGTERM)
        psutil.wait_procs(procs, timeout=60)
    else:
        stop_now(server)
    server.stop(grace=1.0)  # anything left (none expected)
    return time.monotonic() - began


def launch(args: argparse.Namespace, name: str, extra: str, index: int, how: str
           ) -> dict[str, Any]:
    port = free_port()
    argv = [*shlex.split(args.server_cmd), *common_flags(args), "--port", str(port),
            *shlex.split(extra)]
    env = {**os.environ, "SGLANG_LOG_MS": "1"}
    log = Path(args.out) / f"{name}-{index}.log"
    log.unlink(missing_ok=True)
    launched = time.time()
    server = ServerProcess.spawn(argv, env, log, MARKER + f"{name}-{index}", port=port)
    url = f"http://127.0.0.1:{port}"
    row: dict[str, Any] = {"variant": name, "run": index, "argv": argv, "stop": how}
    deadline = time.monotonic() + args.timeout
    while server.poll() is None and not healthy(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    if server.poll() is not None or time.monotonic() >= deadline:
        server.stop(grace=2.0)
        failure = Failure.from_log(server.log_text(), server.poll())
        row.update(ready_s=None, failure=failure.to_json())
        return row
    row["ready_s"] = time.time() - launched
    with open(log, encoding="utf-8", errors="replace") as lines:
        row["split"] = sglang_startup.parse(lines, launched)
    row["request"] = one_request(url)
    info = Path(args.out) / f"{name}-server_info.json"
    if not info.exists():  # what the server resolved, as it reports it
        with contextlib.suppress(requests.RequestException, ValueError):
            info.write_text(json.dumps(requests.get(url + "/server_info", timeout=10).json(),
                                       indent=1))
    row["stop_s"] = stop_tree(server, how)
    row["stopped_failure"] = Failure.from_log(server.log_text(), server.poll()).to_json()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--draft")
    p.add_argument("--flags", default="", help="common flags of every variant")
    p.add_argument("--server-cmd", default="sglang serve")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS")
    p.add_argument("--stop", choices=("term", "kill", "both"), default="both")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--expect-failure", action="append", default=[])
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.variant:
        name, _, extra = spec.partition("=")
        for i in range(args.repeat):
            hows = ["term", "kill"] if args.stop == "both" else [args.stop]
            row = launch(args, name, extra, i, hows[i % len(hows)])
            rows.append(row)
            split = row.get("split") or {}
            failure = row.get("failure")
            print(f"{name}[{i}] ready {row.get('ready_s') or float('nan'):.1f} s  "
                  f"split {json.dumps({k: round(v, 2) for k, v in split.items() if v})}  "
                  f"stop({row['stop']}) {row.get('stop_s', float('nan')):.2f} s  "
                  + (f"FAILED [{failure['kind']}] {failure['message'][:160]}" if failure else ""),
                  flush=True)
            if failure and name not in args.expect_failure:
                print(f"  unexpected failure, log: {args.out}/{name}-{i}.log", flush=True)
    (Path(args.out) / "startup.json").write_text(json.dumps(
        {"machine": machine(), "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
