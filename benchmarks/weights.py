"""Random weights where timing does not depend on them (issue 18): one staged verify-campaign
run with the weight policy (``--weights auto``) against the same run with the checkpoint's
weights everywhere (``--weights real``), both real ``servetune run``s (a subprocess, real Ray,
the stand-in server) on a scaled-down clock.

    python -m benchmarks.weights [--samples 30] [--scale 0.15] [--load-s 60] [--dummy-load-s 5]
                                 [--speculative-stage]

The stand-in models a load of ``--load-s`` (target) + ``--draft-load-s`` (draft) seconds of
the checkpoint's weights and ``--dummy-load-s`` per model of random ones, slept at ``--scale``
real seconds per modelled second. The campaign: verify-campaign, staged, grid inside each stage,
``verify_ms`` as the objective, the speculative shape pinned (a verify-time campaign tunes the
communication for the shape it serves; ``--speculative-stage`` searches it too, on the
checkpoint's weights), ``allreduce-backend`` pinned to the default (the
stand-in does not model most backends: their ties would make the decision a coin toss), then
the confirm stage (top 1 and the baseline, ``--confirm`` launches each) on the checkpoint's
weights.

Prints, per run: the campaign's wall time (first trial launched to last ended, from the
journal), the servetune process's, trials by weights, the decision; then the saving servetune
itself estimated; the last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import exit_on_sigterm, machine, with_root_on_path
from simulator.runs import STAND_IN, Background, Experiment, Result, ray_tmpdir
from tuner.output import readiness

SPECULATIVE_PINS = ("speculative-num-steps=3", "speculative-eagle-topk=1",
                    "speculative-num-draft-tokens=4")


@dataclass(frozen=True)
class Settings:
    samples: int = 30
    scale: float = 0.15  # real seconds per modelled startup second
    load_s: float = 60.0
    draft_load_s: float = 6.0
    dummy_load_s: float = 5.0
    confirm: int = 3  # launches each at most: the confirm stage looks from 3 on
    time_scale: float = 0.05  # real seconds per model second while serving
    speculative_stage: bool = False  # search the speculative shape too (on real weights)

    def server(self) -> str:
        return shlex.join([*STAND_IN, "--fake-time-scale", str(self.time_scale),
                           "--fake-startup-s", "0", "--fake-noise", "0.002",
                           "--fake-max-ranks", "1",
                           "--fake-load-s", str(self.load_s),
                           "--fake-draft-load-s", str(self.draft_load_s),
                           "--fake-dummy-load-s", str(self.dummy_load_s),
                           "--fake-startup-scale", str(self.scale)])

    def argv(self, exp: Experiment, weights: str) -> list[str]:
        chosen = ("allreduce-backend=default",
                  *(() if self.speculative_stage else SPECULATIVE_PINS))
        pins = [w for pin in chosen for w in ("--pin", pin)]
        return ["run", *exp.args(
            "--speculative-algorithm", "EAGLE3", "--space", "verify-campaign",
            "--search", "staged", "--stage-search", "grid", "--samples", str(self.samples),
            "--rounds", "1", "--metric", "verify_ms", "--mode", "min", *pins,
            "--confirm", str(self.confirm), "--confirm-top", "1", "--no-dashboard",
            "--launch-spread", "0",  # its launches differ by 0.2% noise: no ties to confirm
            "--weights", weights, server=self.server(),
            ready_timeout=60 + 2 * self.scale * (self.load_s + self.draft_load_s))]


@dataclass
class CampaignRun:
    weights: str
    process_s: float  # the servetune command, Ray's start and the reports included
    campaign_s: float  # the first trial's launch to the last trial's end (the journal)
    trials: int
    on_dummy: int
    kind: str  # the decision: confirmed, default, unconfirmed, none
    chosen: dict[str, Any] | None
    confirm_accept: list[float]  # the ok confirm launches' accept length (1.0: random weights)
    lines: list[str]  # what servetune printed about the campaign
    estimated_saving_s: float | None  # servetune's own estimate of what random weights saved
    out: str  # the experiment folder
    failures: list[str]  # each trial that did not end ok: id, phase, kind, message
    # the campaign on the model's clock: each trial's load its modelled seconds (its slept
    # load / the scale), servetune's own time as measured
    model_s: float = 0.0

    def text(self) -> str:
        failed = f"; failed: {'; '.join(self.failures)}" if self.failures else ""
        return (f"--weights {self.weights}: campaign {self.campaign_s:.1f} s ({self.model_s:.0f} s "
                f"on the model's clock; servetune "
                f"{self.process_s:.1f} s), {self.trials} trials, {self.on_dummy} on random "
                f"weights; decision {self.kind}: {self.chosen}{failed}")


@dataclass
class Campaign:
    """A campaign under way (``start_campaign``): ``finish`` waits for it and reads it."""

    exp: Experiment
    weights: str
    settings: Settings
    background: Background

    def finish(self, timeout: float = 3600) -> CampaignRun:
        result = self.background.finish(timeout)
        return read_campaign(self.exp, self.weights, result, self.settings)

    def stop(self) -> None:
        """Given up on: the driver is stopped as a user stops it, its processes reaped."""
        self.exp.stop(self.background.popen)


def start_campaign(root: Path, ray_tmp: Path, weights: str, settings: Settings) -> Campaign:
    exp = Experiment.create(root, ray_tmp, name=f"weights-{weights}")
    return Campaign(exp, weights, settings, exp.start(settings.argv(exp, weights)))


def run_campaign(root: Path, ray_tmp: Path, weights: str, settings: Settings) -> CampaignRun:
    exp = Experiment.create(root, ray_tmp, name=f"weights-{weights}")
    return read_campaign(exp, weights, exp.run(settings.argv(exp, weights), timeout=3600),
                         settings)


def read_campaign(exp: Experiment, weights: str, result: Result, settings: Settings
                  ) -> CampaignRun:
    if result.returncode != 0:
        raise RuntimeError(f"servetune failed:\n{result}")
    left = exp.cleanup()
    if left:
        raise RuntimeError(f"processes survived the run: {left}")
    events = exp.journal()
    starts = [e["time"] for e in events if e.get("event") == "start"]
    ends = [e["time"] for e in events if e.get("event") == "end"]
    table = exp.table()
    dummy = int((table["weights"] == "dummy").sum()) if "weights" in table else 0
    decision = json.loads((exp.out / "confirm.json").read_text())["decision"]
    # the confirm launches the decision was judged on (one that failed for a reason outside
    # its configuration was launched again: the failure is in ``failures``)
    confirm = table[(table["phase"] == "confirm") & (table["status"] == "ok")]
    accept = [float(v) for v in confirm.get("accept_length", [])]
    lines = [ln for ln in result.stdout.splitlines()
             if ln.startswith(("campaign:", "saved by random weights", "weights"))]
    estimate = readiness.campaign(exp.out, table).saved_s
    failures = [f"{r.trial_id} ({r.phase}) {r.failure_kind}: {r.failure}"
                for r in table[table["status"] != "ok"].itertuples()]
    # The stand-in's loads slept at ``scale`` real s per modelled s: back on the model's
    # clock, each trial's load takes its modelled seconds, servetune's own time is as measured.
    loads = (float(table["startup_weights_s"].fillna(0).sum())
             if "startup_weights_s" in table else 0.0)
    model_s = max(ends) - min(starts) + loads * (1.0 / settings.scale - 1.0)
    return CampaignRun(weights, result.seconds, max(ends) - min(starts), len(table), dummy,
                       decision["kind"], decision.get("config"), accept, lines, estimate,
                       str(exp.out), failures, model_s)


def saving(auto: CampaignRun, real: CampaignRun) -> float:
    return 1.0 - auto.campaign_s / real.campaign_s


def model_saving(auto: CampaignRun, real: CampaignRun) -> float:
    """The saving on the model's clock: the scaled-down loads count their modelled seconds, so
    servetune's own per-trial time (a busy box's) weighs what it weighs beside real loads."""
    return 1.0 - auto.model_s / real.model_s


def report_lines(runs: dict[str, CampaignRun]) -> list[str]:
    """Each run, what it saved (measured, estimated, on the model's clock); the headline last."""
    lines = []
    for run in runs.values():
        lines.append(run.text())
        lines += [f"  {line}" for line in run.lines]
    auto, real = runs["auto"], runs["real"]
    measured = real.campaign_s - auto.campaign_s
    return [*lines,
            f"confirm launches' accept length: auto {auto.confirm_accept}, real "
            f"{real.confirm_accept} (1.0 would mean random weights)",
            f"saved: {measured:.1f} s measured (real - auto), "
            f"{auto.estimated_saving_s or float('nan'):.1f} s as servetune estimated it",
            f"on the model's clock (each load its modelled seconds): "
            f"{model_saving(auto, real):.0%} less ({auto.model_s:.0f} s vs {real.model_s:.0f} s)",
            f"random weights: {saving(auto, real):.0%} less campaign wall time than real weights "
            f"everywhere ({auto.campaign_s:.1f} s vs {real.campaign_s:.1f} s; servetune "
            f"{auto.process_s:.1f} s vs {real.process_s:.1f} s), same decision: "
            f"{'yes' if same_decision(runs) else 'NO'}"]


def same_decision(runs: dict[str, CampaignRun]) -> bool:
    auto, real = runs["auto"], runs["real"]
    return (auto.kind, auto.chosen) == (real.kind, real.chosen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Settings()
    for name in ("samples", "scale", "load_s", "draft_load_s", "dummy_load_s", "confirm"):
        parser.add_argument("--" + name.replace("_", "-"), type=type(getattr(defaults, name)),
                            default=getattr(defaults, name))
    parser.add_argument("--keep", action="store_true", help="keep the two experiment folders")
    parser.add_argument("--speculative-stage", action="store_true",
                        help="search the speculative shape as well (its stage loads the "
                        "checkpoint's weights)")
    args = parser.parse_args(argv)
    settings = Settings(args.samples, args.scale, args.load_s, args.draft_load_s,
                        args.dummy_load_s, args.confirm,
                        speculative_stage=args.speculative_stage)
    with_root_on_path()
    exit_on_sigterm()
    print(machine())
    print(f"stand-in: checkpoint {settings.load_s:g} s + draft {settings.draft_load_s:g} s, "
          f"random weights {settings.dummy_load_s:g} s per model (modelled), at "
          f"{settings.scale:g} real s per modelled s; verify-campaign staged (grid), "
          f"{settings.samples} trials, verify_ms, confirm top 1 x {settings.confirm}; the "
          f"speculative shape {'searched' if settings.speculative_stage else 'pinned'}")
    root = Path(tempfile.mkdtemp(prefix="st-weights-"))
    try:
        with ray_tmpdir() as ray_tmp:
            runs = {w: run_campaign(root, ray_tmp, w, settings) for w in ("auto", "real")}
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.keep:
        print(f"experiments: {root}")
    for line in report_lines(runs):
        print(line)
    return 0 if same_decision(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
