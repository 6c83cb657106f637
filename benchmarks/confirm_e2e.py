"""Issue 30's bar end to end: real `servetune run`s on the stand-in where the user's own
setting (given with --server-arg) is 25% slower than the candidates, or 2% slower, and each
launch draws its own speed (--fake-launch-spread: one launch's sd on the log scale). Counts
how often the sequential confirm stage confirms a winner, and the launches it used.

The space (a temporary YAML) searches `--mem-fraction-static` (an open knob the stand-in does
not model); the user serves 0.9, which the stand-in makes slow (`--fake-fault-if
slow:--mem-fraction-static=0.9`, verify and draft times the --gap factor). The metric is
verify ms (lower is better): the slow factor applies to it alone.

    python -m benchmarks.confirm_e2e [--runs 20] [--gap 1.25] [--spread 0.10]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import tempfile
from pathlib import Path

from benchmarks._common import exit_on_sigterm, machine, with_root_on_path
from simulator.runs import STAND_IN, Experiment, ray_tmpdir

SPACE = """name: confirm-e2e
description: the user's memory fraction against two others (the stand-in models none)
knobs:
  --mem-fraction-static: {flag: str, values: ["0.8"]}
"""


def one_run(root: Path, index: int, gap: float, spread: float, cap: int) -> dict[str, object]:
    space = root / "space.yaml"
    space.write_text(SPACE)
    server = shlex.join([*STAND_IN, "--fake-time-scale", "0.2", "--fake-startup-s", "0.2",
                         "--fake-noise", "0.01", "--fake-launch-spread", str(spread),
                         "--fake-seed", str(index), "--fake-fault-if",
                         "slow:--mem-fraction-static=0.9", "--fake-slow-factor", str(gap)])
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp, name=f"run{index}")
        argv = ["run", *exp.args(
            "--speculative-algorithm", "EAGLE3", "--space", str(space), "--search", "grid",
            "--samples", "3", "--rounds", "1", "--scheduler", "fifo", "--metric", "verify_ms",
            "--mode", "min", "--server-arg", "--mem-fraction-static 0.9",
            "--launch-spread", str(spread), "--confirm", str(cap), "--confirm-top", "1",
            "--output-len", "96", "--no-dashboard", server=server)]
        result = exp.run(argv, timeout=900)
        left = exp.cleanup()
    if result.returncode != 0 or left:
        raise RuntimeError(f"run {index} failed or left processes {left}:\n{result}")
    data = json.loads((exp.out / "confirm.json").read_text())
    launches = {e["label"]: len(e["trials"]) for e in data["entries"]}
    return {"kind": data["decision"]["kind"], "stopped": data.get("stopped"),
            "launches": launches, "launch_spread": data.get("launch_spread")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--gap", type=float, default=1.25, help="the user's setting's slow factor")
    p.add_argument("--spread", type=float, default=0.10, help="one launch's sd (log scale)")
    p.add_argument("--cap", type=int, default=10, help="--confirm")
    args = p.parse_args(argv)
    with_root_on_path()
    exit_on_sigterm()
    print(machine())
    root = Path(tempfile.mkdtemp(prefix="confirm-e2e-"))
    confirmed, launches = 0, []
    try:
        for i in range(args.runs):
            run = one_run(root, i, args.gap, args.spread, args.cap)
            confirmed += run["kind"] == "confirmed"
            total = sum(run["launches"].values())  # type: ignore[attr-defined]
            launches.append(total)
            print(f"run {i}: {run['kind']}, {total} confirm launches {run['launches']}, "
                  f"stopped at {run['stopped']}, measured launch spread "
                  f"{run['launch_spread']:.3f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"confirm e2e: the user's setting {args.gap:.2f}x slower at a {args.spread:.0%} launch "
          f"spread: confirmed in {confirmed} of {args.runs} runs, {sum(launches) / len(launches):.1f} "
          f"confirm launches a run (cap {args.cap} each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
