"""Issue 10 on a GPU: the verify-pass proxy profiled with torch.profiler under CUDA graphs.

    python -m benchmarks.profile_gpu --fixture tests/launchers/fixtures/proxy_trace_h200.json.gz

1. Fixture: one proxy launch (--model, --layers, --ranks), one measured round, a profile of
   --steps verify passes, compute-only passes and collectives-alone passes. Rank 0's trace is
   trimmed (``launchers.trace.trim``: 2 steps of each kind, ``args`` cut to the correlation id) and
   written gzipped to --fixture, byte for byte the same for the same trace, with the round's
   numbers and the parser's split of the kept steps beside the events
   (``servetune_fixture``); refused when over 200 KB. tests/launchers/test_trace_fixture.py
   reads it.
2. End to end (unless --no-e2e): the path of ``servetune profile`` (tuner.run.profile, in this
   process, no Ray) for the baseline and one NCCL config on --e2e-model, into --out: the
   table, the sentences, breakdown.png. The numbers go in BENCHMARKS.md.

No Ray and no pandas are needed; matplotlib only for the PNG.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._common import gpu_ids

if TYPE_CHECKING:
    from tuner.record.profile import ProfileRecord

MAX_FIXTURE_BYTES = 200_000



def capture(args: argparse.Namespace, experiment: str) -> dict[str, Any]:
    """Launch, measure a round, profile, stop; trim rank 0's trace into the fixture."""
    from launchers import trace
    from launchers.base import TrialContext
    from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
    from launchers.proxy.protocol import STEP_SPANS

    workload = ProxyWorkload(ProxyArgs(model=args.model, layers=args.layers, device=args.device,
                                       ranks=args.ranks, iters_per_round=args.iters,
                                       kv_len=args.kv_len))
    ctx = TrialContext(experiment, "fixture", (args.out / "fixture").absolute(),
                       gpu_ids(args.ranks, args.device))
    plan = workload.plan({}, ctx)
    workload.preflight(plan, ctx)
    began = time.monotonic()
    with workload.start(plan, ctx) as running:
        running.wait_ready(args.ready_timeout)
        measured = running.measure(0)
        files = running.profile(args.steps)
        info = dict(running.info)
    wall = time.monotonic() - began
    full = trace.read(files, [STEP_SPANS])
    events = trace.load_events(files[0])
    small = trace.trim(events, steps_per_kind=2, spans=[STEP_SPANS])
    kept = trace.steps_of(small["traceEvents"], [STEP_SPANS])
    scale = info["num_hidden_layers"] / info["layers_run"]
    head = measured["head_ms"]
    small["servetune_fixture"] = {
        "command": " ".join(sys.argv), "model": args.model, "layers_run": info["layers_run"],
        "ranks": args.ranks, "steps_profiled": args.steps, "device_name": info.get("device_name"),
        "torch": info.get("torch"), "nccl": info.get("nccl"), "graph": info.get("graph"),
        "measured": {k: measured.get(k) for k in ("verify_ms", "head_ms", "compute_ms",
                                                  "exposed_comm_ms", "comm_alone_ms",
                                                  "scaled")},
        # the round's verify_ms is scaled to the whole model: back to the layers run
        "pass_ms_run": head + (measured["verify_ms"] - head) / scale, "scale": scale,
        "kept_steps": [{"kind": s.kind, "step_us": s.step_us, "split_us": s.split_us}
                       for s in kept],
        "all_steps": full.to_json()["summaries"],
    }
    blob = gzip.compress(json.dumps(small, sort_keys=True, separators=(",", ":")).encode(),
                         compresslevel=9, mtime=0)
    print(f"fixture: {len(small['traceEvents'])} events of {len(events)}, {len(blob)} bytes; "
          f"trial wall {wall:.1f} s", flush=True)
    for summary in full.summaries.values():
        print(f"  all {summary.steps} steps: {summary.sentence()}", flush=True)
    if len(blob) > MAX_FIXTURE_BYTES:
        raise SystemExit(f"the trimmed trace is {len(blob)} bytes, over {MAX_FIXTURE_BYTES}: "
                         "use fewer --layers")
    args.fixture.parent.mkdir(parents=True, exist_ok=True)
    args.fixture.write_bytes(blob)
    print(f"wrote {args.fixture}", flush=True)
    meta: dict[str, Any] = small["servetune_fixture"]
    return meta


def end_to_end(args: argparse.Namespace, experiment: str) -> ProfileRecord:
    """tuner.run.profile's path for the baseline and one NCCL config, as `servetune profile`."""
    from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
    from search_spaces.knobs import CATALOGUE
    from search_spaces.space import load
    from tuner.run.lifecycle import Limits
    from tuner.run.profile import Target, Where, profile_configs

    workload = ProxyWorkload(ProxyArgs(model=args.e2e_model, device=args.device, ranks=args.ranks,
                                       iters_per_round=args.iters))
    supported = frozenset(n for n, k in CATALOGUE.items() if workload.supports(k))
    space, _ = load("verify-campaign").restricted_to(supported)
    targets = [Target("baseline", space.baseline()),
               Target("nccl-ll", space.complete({"NCCL_PROTO": "LL"}))]
    where = Where(out_dir=(args.out / "e2e").absolute(), experiment=experiment,
                  gpu_ids=gpu_ids(args.ranks, args.device),
                  limits=Limits(ready_timeout=args.ready_timeout))
    began = time.monotonic()
    doc = profile_configs(workload, targets, where, steps=args.steps)
    print(f"end to end: {time.monotonic() - began:.1f} s for {len(targets)} configs", flush=True)
    return doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixture", type=Path, help="write the trimmed trace here (.json.gz)")
    p.add_argument("--model", default="llama-3.1-70b", help="fixture shape")
    p.add_argument("--layers", type=int, default=4, help="fixture layers (keeps it small)")
    p.add_argument("--e2e-model", default="kimi-k2.5", help="end-to-end shape (all layers "
                   "when they fit)")
    p.add_argument("--no-e2e", action="store_true")
    p.add_argument("--ranks", type=int, default=1, help="GPUs (one rank each)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: a dry run of this script with gloo ranks (e.g. --model tiny "
                   "--e2e-model tiny --ranks 2)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--iters", type=int, default=20, help="replays per measured round")
    p.add_argument("--kv-len", type=int, default=4096)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/servetune-profile-gpu"),
                   help="work folder (proxy logs, traces, breakdown.png)")
    args = p.parse_args()
    from launchers.process import marked_processes, reap_all

    experiment = f"profile-gpu-{os.getpid()}"
    try:
        if args.fixture is not None:
            capture(args, experiment)
        if not args.no_e2e:
            end_to_end(args, experiment)
    finally:
        left = marked_processes(f"{experiment}/")
        reap_all(f"{experiment}/")
        if left:
            print(f"reaped {len(left)} leftover processes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
