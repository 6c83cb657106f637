"""The proxy's all-reduce paths side by side, at TP over NVLink and under --interconnect pcie:
verify ms, compute ms (the pass with its collectives as no-ops, measured), exposed comm ms,
exposed per all-reduce, comm alone; with --profile also the profiler's split of the verify
pass (``servetune profile``'s breakdown: the communication kernels' share, and the profiled
verify step minus the profiled compute-only step) to set beside exposed_comm_ms.

    python -m benchmarks.proxy_paths --model kimi-k2.5 --ranks 2 --json out.json
    python -m benchmarks.proxy_paths --device cpu --model tiny --ranks 2 --rounds 1  # dry run
    python -m benchmarks.proxy_paths --proxy-comm emulated --proxy-comm native ...  # both modes

Each row is one trial the way the engine runs it (plan, preflight, start, ready, rounds,
stop), through ProxyWorkload. Configurations (SGLang flags and NCCL variables):
  sglang default   {} (for Kimi and DeepSeek shapes on SM90 SGLang fuses the all-reduce)
  nccl             --disable-custom-all-reduce, fusion off
  nccl best        the fastest of NCCL_GRAPH_MIXING_SUPPORT=0, NCCL_PROTO=LL, NCCL_PROTO=LL128
                   on top of nccl (each is also printed)
  custom allreduce fusion off (SGLang's custom allreduce where it takes the size)
  torch symm-mem   --enable-torch-symm-mem with custom allreduce and fusion off (SGLang
                   disables it without NVLink multicast: the row then says nccl)
  fusion           --flashinfer-allreduce-fusion-backend trtllm (emulated)
  pcie-ipc         allreduce-backend pcie-ipc (native mode only: the emulated mode does not
                   model it)
``--proxy-comm`` (repeatable: emulated, native) runs every row in each mode: native rows go
through the installed SGLang's GroupCoordinator (``launchers.proxy.comm.native``) and name the
communicator that served in ``served_by``. The path each row ran is in its ``allreduce_path``
column. The median of the rounds after the
first is reported. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import gpu_ids

NCCL = {"--disable-custom-all-reduce": True,
        "--enforce-disable-flashinfer-allreduce-fusion": True}
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("sglang default", {}),
    ("nccl", NCCL),
    ("nccl graph-mixing 0", {**NCCL, "NCCL_GRAPH_MIXING_SUPPORT": 0}),
    ("nccl LL", {**NCCL, "NCCL_PROTO": "LL"}),
    ("nccl LL128", {**NCCL, "NCCL_PROTO": "LL128"}),
    ("custom allreduce", {"--enforce-disable-flashinfer-allreduce-fusion": True}),
    ("torch symm-mem", {**NCCL, "--enable-torch-symm-mem": True}),
    ("fusion", {"--flashinfer-allreduce-fusion-backend": "trtllm"}),
    ("pcie-ipc", {"allreduce-backend": "pcie-ipc"}),
]
NATIVE_ONLY = frozenset({"pcie-ipc"})
COLUMNS = ("verify_ms", "compute_ms", "exposed_comm_ms", "exposed_per_allreduce_us",
           "comm_alone_ms", "comm_alone_per_allreduce_us", "exposed_comm_share")



def run_row(label: str, config: dict[str, Any], interconnect: str, args: argparse.Namespace,
            experiment: str, mode: str = "emulated") -> dict[str, Any]:
    from launchers import trace
    from launchers.base import TrialContext
    from launchers.failures import TrialFailed
    from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
    from launchers.proxy.protocol import STEP_SPANS

    workload = ProxyWorkload(ProxyArgs(model=args.model, layers=args.layers, device=args.device,
                                       ranks=args.ranks, iters_per_round=args.iters,
                                       interconnect=interconnect, kv_len=args.kv_len,
                                       proxy_comm=mode))
    trial = f"{mode}-{interconnect}-{label.replace(' ', '_')}"
    ctx = TrialContext(experiment, trial, (args.out / trial).absolute(),
                       gpu_ids(args.ranks, args.device))
    row: dict[str, Any] = {"interconnect": interconnect, "config": label, "mode": mode}
    began = time.monotonic()
    try:
        plan = workload.plan(config, ctx)
        workload.preflight(plan, ctx)
        with workload.start(plan, ctx) as running:
            row["ready_s"] = round(running.wait_ready(args.ready_timeout), 2)
            rounds = [running.measure(i) for i in range(args.rounds)]
            files = running.profile(args.steps) if args.profile else []
            info = dict(running.info)
    except TrialFailed as err:
        row.update(failure=err.failure.kind.value, message=err.failure.message)
        return row
    kept = rounds[1:] or rounds
    row.update({k: statistics.median(r[k] for r in kept) for k in COLUMNS})
    row.update(allreduce_path=info["allreduce_path"],
               sglang_allreduce_path=info["sglang_allreduce_path"],
               symm_mem_backend=info.get("symm_mem_backend"),
               served_by=info.get("allreduce_served_by"),
               sglang_version=info.get("sglang_version"),
               correctness=kept[-1]["correctness"], setup_s=info.get("setup_s"),
               layers_run=info.get("layers_run"), scaled=info.get("scaled"),
               wall_s=round(time.monotonic() - began, 1))
    if files:
        result = trace.read(files, [STEP_SPANS])
        verify, compute = result.main("verify"), result.main("compute_only")
        if verify is not None:
            row["profile_comm_ms"] = verify.communication_ms
            row["profile_step_ms"] = verify.step_ms
        if verify is not None and compute is not None:
            row["profile_compute_step_ms"] = compute.step_ms
            row["profile_exposed_ms"] = verify.step_ms - compute.step_ms
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'regime':7} {'mode':8} {'config':20} {'path':24} {'verify':>7} {'compute':>7} "
            f"{'exposed':>7} {'exp/AR us':>9} {'alone':>6} {'prof comm':>9} {'prof exp':>8}")
    lines = [head]
    for r in rows:
        if "failure" in r:
            lines.append(f"{r['interconnect']:7} {r.get('mode', ''):8} {r['config']:20} "
                         f"{r['failure']}: "
                         f"{r['message'][:80]}")
            continue
        prof, prof_exp = r.get("profile_comm_ms"), r.get("profile_exposed_ms")
        lines.append(f"{r['interconnect']:7} {r.get('mode', ''):8} {r['config']:20} "
                     f"{r['allreduce_path']:24} "
                     f"{r['verify_ms']:7.3f} {r['compute_ms']:7.3f} {r['exposed_comm_ms']:7.3f} "
                     f"{r['exposed_per_allreduce_us']:9.2f} {r['comm_alone_ms']:6.3f} "
                     + (f"{prof:9.3f}" if prof is not None else f"{'':9}")
                     + (f" {prof_exp:8.3f}" if prof_exp is not None else ""))
    for regime, mode in dict.fromkeys((r["interconnect"], r.get("mode")) for r in rows):
        nccl = [r for r in rows if (r["interconnect"], r.get("mode")) == (regime, mode)
                and "failure" not in r and r["config"].startswith("nccl")]
        if nccl:
            best = min(nccl, key=lambda r: r["verify_ms"])
            lines.append(f"{regime} {mode}: NCCL's best is '{best['config']}', verify "
                         f"{best['verify_ms']:.3f} ms, exposed {best['exposed_comm_ms']:.3f} ms")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="kimi-k2.5")
    p.add_argument("--layers", type=int, help="default: all that fit")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--interconnect", action="append", choices=["nvlink", "pcie"],
                   help="regimes (default: both)")
    p.add_argument("--config", action="append", help="labels of CONFIGS to run (default: all)")
    p.add_argument("--proxy-comm", action="append", choices=["emulated", "native"],
                   help="modes, each row in each (default: emulated)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--kv-len", type=int, default=4096)
    p.add_argument("--profile", action="store_true", help="profile each row (--steps replays)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/servetune-proxy-paths"))
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args()
    from launchers.process import reap_all

    experiment = f"proxy-paths-{os.getpid()}"
    rows = []
    try:
        for interconnect in args.interconnect or ["nvlink", "pcie"]:
            for label, config in CONFIGS:
                for mode in args.proxy_comm or ["emulated"]:
                    if (args.config and label not in args.config) or (
                            label in NATIVE_ONLY and mode != "native"):
                        continue
                    row = run_row(label, config, interconnect, args, experiment, mode)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if args.json:
                        args.json.write_text(json.dumps(rows, indent=1))
    finally:
        reap_all(f"{experiment}/")
    print(table(rows), flush=True)
    return 0 if all("failure" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
