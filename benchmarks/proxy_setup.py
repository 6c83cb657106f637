"""How long a proxy trial takes to get ready, and where the time goes: before and after.

    python -m benchmarks.proxy_setup --model kimi-k2.5 --ranks 2 --before-root /path/to/old
    python -m benchmarks.proxy_setup --device cpu --model tiny --ranks 2   # dry run

Runs ``python -m launchers.proxy.worker --spawn R ... --rounds 1`` from this checkout (and,
with --before-root, from another one: the code before the change) --repeats times each,
alternating, and reads the time from starting the root process to rank 0's ready line (seen
on its stdout), the root's wall time, and the ready line's own ``setup_s`` (this checkout
splits it from the moment the root started the rank: python = interpreter and the proxy's
modules, imports = torch, group = the process group, collectives = symmetric memory where the
path uses it, build = weights, capture = warm-up and six graphs, gate = the correctness
check, total = rank start to ready). Prints one JSON line per run and a summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_once(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "launchers.proxy.worker", "--spawn", str(args.ranks),
            "--device", args.device, "--model", args.model, "--rounds", "1", "--iters", "5",
            "--kv-len", str(args.kv_len), "--no-check", *args.extra]
    if args.layers:
        argv += ["--layers", str(args.layers)]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}
    began = time.monotonic()
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    ready_s, ready, tail = None, {}, []
    for line in proc.stdout:
        if line.startswith('{"event": "ready"'):
            ready_s = time.monotonic() - began
            ready = json.loads(line)
        tail = [*tail, line.rstrip()][-5:]
    code = proc.wait()
    row = {"root": str(root), "rc": code, "ready_s": round(ready_s, 2) if ready_s else None,
           "wall_s": round(time.monotonic() - began, 2), "setup_s": ready.get("setup_s"),
           "layers_run": ready.get("layers_run"), "allreduce_path": ready.get("allreduce_path")}
    if code != 0:
        row["tail"] = tail
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="kimi-k2.5")
    p.add_argument("--layers", type=int, help="default: all")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--kv-len", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--before-root", type=Path, help="a checkout of the code before the change")
    p.add_argument("--json", type=Path)
    p.add_argument("extra", nargs="*", help="more worker flags after --")
    args = p.parse_args()
    roots = {"after": ROOT} | ({"before": args.before_root.resolve()} if args.before_root else {})
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in roots}
    for _ in range(args.repeats):
        for label, root in roots.items():
            row = {"label": label, **run_once(root, args)}
            rows[label].append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    for label, found in rows.items():
        ok = [r["ready_s"] for r in found if r["ready_s"] is not None]
        last = found[-1].get("setup_s")
        print(f"{label}: ready {statistics.median(ok) if ok else float('nan'):.2f} s after the "
              f"root starts (median of {len(ok)}); last setup_s {last}", flush=True)
    return 0 if all(r["rc"] == 0 for found in rows.values() for r in found) else 1


if __name__ == "__main__":
    sys.exit(main())
