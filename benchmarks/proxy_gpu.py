"""The verify-pass proxy on the GPUs at hand: verify ms (graph and eager), the measured
compute and exposed communication, the HBM floor, and the wall time of a trial from process
start to the last round.

    python benchmarks/proxy_gpu.py                      # the presets below, TP = 1 rank
    python benchmarks/proxy_gpu.py --case kimi-k2.5:20 --ranks 8

Each case runs `python -m launchers.proxy.worker --spawn R ...` as a fresh process tree,
the way a trial does, once with CUDA graphs and once eager. Prints one row per run and a
last line with the graph-over-eager speedup.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_CASES = ("tiny:0", "llama-3.1-70b:8", "kimi-k2.5:8")


def run_case(model: str, layers: int, ranks: int, graph: bool, rounds: int, iters: int,
             extra: list[str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "launchers.proxy.worker", "--spawn", str(ranks),
            "--model", model, "--rounds", str(rounds), "--iters", str(iters),
            "--graph" if graph else "--no-graph", *extra]
    # 0: all layers when they fit, else as many as fit (the launcher's default)
    argv += ["--layers", str(layers)] if layers else ["--fit-layers"]
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parent.parent)
    wall = time.monotonic() - began
    events = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    ready = next((e for e in events if e.get("event") == "ready"), {})
    rounds_seen = [e for e in events if e.get("event") == "round"]
    row: dict[str, Any] = {"model": model, "layers": layers or "fit", "ranks": ranks,
                           "graph": graph, "rc": proc.returncode, "wall_s": round(wall, 1)}
    if proc.returncode != 0 or not rounds_seen:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return row
    last = rounds_seen[1:] or rounds_seen  # the first round includes warm caches settling
    row.update({
        "verify_ms": statistics.median(r["verify_ms"] for r in last),
        "verify_p90_ms": statistics.median(r["verify_p90_ms"] for r in last),
        "compute_ms": statistics.median(r["compute_ms"] for r in last),
        "exposed_comm_ms": statistics.median(r["exposed_comm_ms"] for r in last),
        "exposed_comm_share": statistics.median(r["exposed_comm_share"] for r in last),
        "exposed_per_allreduce_us": statistics.median(r["exposed_per_allreduce_us"]
                                                      for r in last),
        "comm_alone_ms": statistics.median(r["comm_alone_ms"] for r in last),
        "allreduce_path": last[-1]["allreduce_path"],
        "hbm_floor_ms": last[-1]["hbm_floor_ms"],
        "bytes_per_pass": last[-1]["bytes_per_pass"],
        "scaled": last[-1]["scaled"],
        "setup_s": ready.get("setup_s"), "layers_run": ready.get("layers_run"),
        "layers_source": ready.get("layers_source"),
        "nccl": ready.get("nccl"), "device_name": ready.get("device_name"),
    })
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append",
                        help="MODEL:LAYERS (0 = all layers, or as many as fit)")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("extra", nargs="*", help="more worker flags after --")
    args = parser.parse_args()
    rows = []
    for case in args.case or DEFAULT_CASES:
        model, _, layers = case.partition(":")
        for graph in (True, False):
            row = run_case(model, int(layers or 0), args.ranks, graph, args.rounds, args.iters,
                           args.extra)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    ratios = []
    for g, e in zip(rows[::2], rows[1::2], strict=True):
        if "verify_ms" in g and "verify_ms" in e:
            ratios.append(e["verify_ms"] / g["verify_ms"])
    if ratios:
        print(f"graph over eager: {statistics.median(ratios):.2f}x faster verify (median of "
              f"{len(ratios)} shapes)")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
