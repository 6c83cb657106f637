"""The stand-in's command line: SGLang's own parser (captured into a fixture, sglang_cli.py)
plus the simulator's ``--fake-*`` switches, the SGLang flags a launch set, and the fault it
plays (``--fake-fault``, or the first ``--fake-fault-if`` whose conditions hold)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator import fake_nodes, sglang_cli

FAULTS = ("crash-startup", "hang-startup", "oom-startup", "no-weights-startup",
          "missing-module-startup", "die-mid-round", "hang-mid-round", "ignore-sigterm",
          "setsid-grandchild", "slow")
CLI = sglang_cli.load_fixture()


def build_parser() -> argparse.ArgumentParser:
    """SGLang's parser (from the fixture) plus the stand-in's own ``--fake-*`` switches."""
    p = sglang_cli.build_parser(CLI)
    g = p.add_argument_group("stand-in switches (the simulator only)")
    g.add_argument("--fake-startup-s", type=float, default=0.3,
                   help="least time to ready (real seconds)")
    g.add_argument("--fake-load-s", type=float, default=0.0,
                   help="modelled seconds to load the target's real weights")
    g.add_argument("--fake-draft-load-s", type=float, default=0.0,
                   help="modelled seconds to load the draft's real weights")
    g.add_argument("--fake-dummy-load-s", type=float, default=0.0,
                   help="modelled seconds to set up a model with --load-format dummy")
    g.add_argument("--fake-capture-s", type=float, default=0.0,
                   help="modelled seconds per captured decode batch size, per model")
    g.add_argument("--fake-warmup-s", type=float, default=0.0,
                   help="modelled seconds of the warm-up request (none with "
                        "--skip-server-warmup)")
    g.add_argument("--fake-startup-scale", type=float, default=1.0,
                   help="real seconds per modelled startup second")
    g.add_argument("--fake-time-scale", type=float, default=0.05,
                   help="real seconds per model second")
    g.add_argument("--fake-noise", type=float, default=0.02, help="multiplicative noise (sd)")
    g.add_argument("--fake-seed", type=int, help="noise seed (default: --random-seed or 0)")
    g.add_argument("--fake-launch-spread", type=float, default=0.0,
                   help="launch-to-launch sd of the model time (log scale): each launch draws "
                        "one factor, from the trial's SERVETUNE_TRIAL marker and the seed, as "
                        "real servers differ from launch to launch far more than round to round")
    g.add_argument("--fake-verify-ms", type=float, help="override the model's verify ms")
    g.add_argument("--fake-draft-ms", type=float, help="override the model's draft ms")
    g.add_argument("--fake-accept-length", type=float,
                   help="override the accept length (whatever the prompts' content)")
    g.add_argument("--fake-fault", choices=FAULTS)
    g.add_argument("--fake-fault-if", action="append", default=[],
                   metavar="FAULT:NAME=VALUE[,NAME=VALUE]",
                   help="FAULT (in place of --fake-fault) when every NAME (an env var or a "
                        "flag) has VALUE; repeatable, the first match wins. Lets one config "
                        "of a search fail its own way")
    g.add_argument("--fake-slow-factor", type=float, default=4.0,
                   help="slow: verify and draft take this many times longer")
    g.add_argument("--fake-die-after", type=int, default=4,
                   help="die-mid-round / hang-mid-round: after this many finished requests")
    g.add_argument("--fake-no-tree-crash", action="store_true",
                   help="a global NCCL_ALGO=Tree does not crash graph capture")
    g.add_argument("--fake-replay-log", type=Path, metavar="LOG",
                   help="print a real server's log (its failure) and die as SGLang does: "
                        "SIGKILL of the whole tree (exit -9)")
    g.add_argument("--fake-allow-any-host", action="store_true")
    g.add_argument("--fake-max-ranks", type=int, default=2,
                   help="rank processes started (at most --tp-size)")
    fake_nodes.add_switches(g)  # --nnodes > 1: the nodes meet, and watch each other
    return p


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """SGLang's flags set on the command line (every spelling -> value), with the deprecated
    fusion switch as the backend it maps to."""
    out = sglang_cli.given_options(args, CLI)
    if args.enable_flashinfer_allreduce_fusion and \
            "--flashinfer-allreduce-fusion-backend" not in out:
        out["--flashinfer-allreduce-fusion-backend"] = "auto"
    return out


def chosen_fault(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The first --fake-fault-if whose conditions all hold, else --fake-fault."""
    flags = flag_values(args)
    for rule in args.fake_fault_if:
        fault, _, conditions = rule.partition(":")
        if fault not in FAULTS:
            raise SystemExit(f"--fake-fault-if {rule!r}: unknown fault {fault!r}")
        holds = True
        for condition in conditions.split(","):
            name, _, value = condition.partition("=")
            actual = flags.get(name) if name.startswith("--") else env.get(name)
            holds = holds and actual is not None and str(actual) == value
        if holds:
            return fault
    return str(args.fake_fault) if args.fake_fault else None
