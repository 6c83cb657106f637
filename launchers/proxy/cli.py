"""The proxy's command line: ``python -m launchers.proxy.worker ...``.

With ``--spawn N`` the process is the root of one process tree that starts N ranks and watches
them (``spawner``); without it, it is one rank (``rank``). The launcher's argv and the tests
use these flags.

By hand: ``python -m launchers.proxy.worker --spawn 2 --device cpu --model tiny --rounds 3``;
add ``--profile-dir DIR`` to profile after the rounds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m launchers.proxy.worker",
        description="Verify-pass proxy: a tensor-parallel decoder stack with a real model's "
                    "shapes, timed under CUDA graphs. Prints one JSON line per round.")
    p.add_argument("--spawn", type=int, metavar="N", help="start N ranks (one per GPU)")
    p.add_argument("--model", default="tiny", help="shape preset or path to a config.json")
    p.add_argument("--layers", type=int, help="run N layers and scale (model does not fit)")
    p.add_argument("--fit-layers", action="store_true",
                   help="GPUs: without --layers, run the most layers that fit in 85%% of GPU "
                   "memory when the whole model does not (with --layers: the launcher fitted N)")
    p.add_argument("--batch", type=int, default=1, help="requests in the verify batch")
    p.add_argument("--draft-tokens", type=int, default=4, help="tokens verified per request")
    p.add_argument("--draft-steps", type=int, help="draft steps per cycle, for the draft "
                   "estimate (default: draft tokens - 1)")
    p.add_argument("--kv-len", type=int, default=4096, help="KV cache entries per request")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--allreduce-path", default="nccl",
                   help="the all-reduce path to run (the launcher passes SGLang's choice: "
                   "nccl, custom_ar_1shot, custom_ar_2shot, torch_symm_mem_2shot, fusion); "
                   "CPU runs gloo whatever it says")
    p.add_argument("--allgather-path", default="nccl", help="the logits all-gather's path")
    p.add_argument("--proxy-comm", choices=["emulated", "native"], default="emulated",
                   help="native: every collective through the installed SGLang's "
                   "GroupCoordinator (its dispatch; --allreduce-path is then SGLang 0.5.23's "
                   "predicted path, recorded beside what served); emulated: run --allreduce-path")
    p.add_argument("--proxy-comm-reason", default="", help="why this mode (recorded)")
    p.add_argument("--native-flags", default="", help="native: SGLang switches that are on, "
                   "comma-separated (disable-custom-all-reduce, enable-mscclpp, "
                   "enable-torch-symm-mem)")
    p.add_argument("--interconnect", default="auto", help="the regime the launcher applied "
                   "(nvlink or pcie), recorded in the results")
    p.add_argument("--iters", type=int, default=50, help="replays timed per round")
    p.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True,
                   help="time CUDA graph replays (--no-graph: eager)")
    p.add_argument("--accept-length", type=float, default=3.0, help="for est_tok_s")
    p.add_argument("--accept-length-source", choices=["assumed", "measured"], default="assumed",
                   help="where --accept-length comes from (reported with every round)")
    p.add_argument("--draft-ms", type=float, help="assumed draft time per cycle")
    p.add_argument("--hbm-bandwidth", type=float, help="B/s per GPU for hbm_floor_ms")
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes the ranks spread over (each "
                   "node runs its own root with --spawn N; launchers/proxy/nodes.py)")
    p.add_argument("--node-rank", type=int, default=0, help="this node's rank (0: the node "
                   "that meets the others and reports)")
    p.add_argument("--dist-init-addr", metavar="HOST:PORT",
                   help="across nodes: node 0's address and port, where the ranks meet")
    p.add_argument("--out", type=Path, help="folder for proxy_rounds.jsonl; rounds are then "
                   "run when the launcher asks for them (proxy_control)")
    p.add_argument("--rounds", type=int, help="run N rounds and exit (default without --out: 3)")
    p.add_argument("--reference", type=Path, help="reference logits to compare with")
    p.add_argument("--write-reference", action="store_true",
                   help="write --reference when it does not exist yet")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="compare the logits with --reference")
    p.add_argument("--tolerance", type=float, help="relative L2 error allowed (default by dtype)")
    p.add_argument("--profile-dir", type=Path, help="where profile requests write their "
                   "traces (default <out>/traces); with --rounds: profile after the rounds")
    p.add_argument("--profile-steps", type=int, default=10,
                   help="replays per span in a --rounds profile")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--idle-timeout", type=float, default=3600.0,
                   help="exit when no round is asked for this long")
    # test only: make one rank fail at a stage, with a given message
    p.add_argument("--fail-at", choices=["init", "ready", "round"], help=argparse.SUPPRESS)
    p.add_argument("--fail-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--fail-message", help=argparse.SUPPRESS)
    args = p.parse_args(list(argv))
    if args.rounds is None and args.out is None:
        args.rounds = 3
    return args


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(words)
    if args.spawn:
        from launchers.proxy.spawner import spawn

        return spawn(args.spawn, words, args.port, nodes=args.nnodes,
                     node_rank=args.node_rank, addr=args.dist_init_addr)
    from launchers.proxy.rank import run_rank

    return run_rank(args)
