"""`servetune run | plan | report | best | profile | spaces | knobs`.

Bad input ends with one line on stderr and exit code 2, before anything is launched.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from launchers.options import READY_TIMEOUT
from launchers.registry import cli_options, kinds
from search_spaces.searches import DEFAULT as DEFAULT_SEARCH
from search_spaces.searches import DEFAULT_STAGE, NAMES, STAGE_NAMES, STAGED, default_help
from search_spaces.space import SpaceError
from tuner.cli.args import CliError, glue_raw_values
from tuner.cli.commands import (
    cmd_best,
    cmd_knobs,
    cmd_plan,
    cmd_profile,
    cmd_report,
    cmd_run,
    cmd_spaces,
)
from tuner.spec import CONFIRM_CAP, DEFAULT_PRESET, SpecError, one_line

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"servetune: error: {message} (see {self.prog} --help)\n")


def _add_experiment_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search")
    g.add_argument("--space", default=DEFAULT_PRESET, help="preset name or YAML file")
    g.add_argument("--pin", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a knob (repeatable), e.g. NCCL_NVLS_ENABLE=0")
    g.add_argument("--search", choices=NAMES, default=DEFAULT_SEARCH, help=default_help())
    g.add_argument("--stage-search", choices=STAGE_NAMES, default=DEFAULT_STAGE,
                   help=f"searcher inside each stage of --search {STAGED}")
    g.add_argument("--samples", type=int, default=None,
                   help="trials, the baseline included (default: sized from the space, and "
                   "printed with a time estimate before the first launch)")
    g.add_argument("--rounds", type=int, default=6, help="benchmark rounds per trial")
    g.add_argument("--scheduler", choices=["asha", "median", "fifo"], default="asha")
    g.add_argument("--metric", help="default: the workload's (output_throughput / est_tok_s)")
    g.add_argument("--mode", choices=["max", "min"])
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--screen", choices=["proxy"],
                   help="sglang: screen the NCCL knobs on the proxy first, then run the top "
                   "--screen-top settings as server trials")
    g.add_argument("--screen-top", type=int, default=3,
                   help="the proxy's best settings promoted to server trials")
    g.add_argument("--screen-spread", type=int, default=2,
                   help="more promoted settings from the middle and bottom of the proxy's "
                   "ranking, so that the proxy-vs-server correlation covers the ranking")
    g.add_argument("--screen-samples", type=int, help="proxy trials in the screen")
    g.add_argument("--weights", choices=["auto", "real", "dummy"], default="auto",
                   help="sglang: which weights the search's servers load: random ones "
                   "(--load-format dummy) for stages whose objective is a timing random "
                   "weights leave unchanged (auto, the default), the checkpoint's "
                   "everywhere (real), or random ones everywhere, the confirm stage and the "
                   "reference without speculative decoding included (dummy); with auto the "
                   "confirm stage loads the checkpoint's")
    g.add_argument("--no-failure-aware", action="store_true",
                   help="do not avoid values that failed the same way twice")
    g.add_argument("--limit", action="append", default=[], metavar="METRIC<=VALUE",
                   help='a limit a config must keep to be chosen (repeatable; <=, >=, <, >; '
                   'any reported metric), e.g. "p99_itl_ms<=30"; checked at every '
                   "concurrency level on that level's figure")
    g.add_argument("--optuna-storage", metavar="URL",
                   help="Optuna searches: keep the study, named after the experiment, in this "
                   "storage (e.g. sqlite:///runs/optuna.db) for optuna-dashboard and resume")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=kinds(),
                   help="default: sglang when --model is given, else the proxy")
    for option in cli_options():  # each workload's own, declared beside its args
        w.add_argument(option.flag, **option.argparse)
        if option is READY_TIMEOUT:  # the engine's, beside the wait it ends
            w.add_argument("--stop-grace", type=float, help="seconds between SIGTERM and "
                           "SIGKILL when a server stops (default 10)")
    r = p.add_argument_group("resources")
    r.add_argument("--gpus-per-trial", type=int, help="default: all GPUs of a node")
    r.add_argument("--nodes-per-trial", type=int, default=1, metavar="N",
                   help="whole nodes a trial holds: one server per node, tensor parallelism "
                   "across them (sglang: --nnodes/--node-rank/--dist-init-addr); needs a Ray "
                   "cluster of at least N nodes (--address)")
    r.add_argument("--num-gpus", type=int, help="GPUs to declare to a local Ray")
    r.add_argument("--num-cpus", type=int, help="CPUs to declare to a local Ray")
    r.add_argument("--address", help="an existing Ray cluster (HOST:PORT)")
    r.add_argument("--no-dashboard", action="store_true")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, help="experiment folder (default runs/<name>)")
    o.add_argument("--name", help="experiment name (default: the folder's name)")
    o.add_argument("--confirm", type=int, default=CONFIRM_CAP, metavar="N",
                   help="after the search, launch the top configs and the baseline afresh, "
                   "alternating, until each is shown better or worse than the baseline beyond "
                   "launch-to-launch noise or cannot be; N: launches per config at most "
                   f"(default {CONFIRM_CAP}, at least 3; 0 skips the stage)")
    o.add_argument("--confirm-time", type=float, metavar="SECONDS",
                   help="the confirm stage stops launching after this long (default: no limit)")
    o.add_argument("--launch-spread", type=float, metavar="FRACTION",
                   help="how far apart launches of one config fall (sd / mean): ASHA never stops "
                   "a trial within it of the best at its round, and every config within it of "
                   "the search's best reaches the confirm stage (default: the workload's, 0.10 "
                   "for SGLang; 0 turns it off)")
    o.add_argument("--confirm-top", type=int, default=3, metavar="K",
                   help="configs the confirm stage re-runs besides the baseline (default 3)")
    o.add_argument("--callback", action="append", default=[], choices=["wandb", "mlflow"],
                   help="also log every trial to Weights & Biases or MLflow through Ray Tune's "
                   "logger callbacks (repeatable; pip install 'servetune[wandb]' / '[mlflow]')")



def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="servetune", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run (or --resume) an experiment")
    _add_experiment_args(run)
    run.add_argument("--resume", metavar="DIR", help="finish an interrupted experiment")
    run.add_argument("--profile", action="store_true", help="at the end, profile the baseline "
                     "and the chosen config (as servetune profile DIR)")
    plan = sub.add_parser("plan", help="print each config's command and env; launch nothing")
    _add_experiment_args(plan)
    plan.add_argument("--json", action="store_true", help="one JSON object per config")
    report = sub.add_parser("report", help="the summary, report.html and its PNG plots, from disk")
    report.add_argument("dir")
    best = sub.add_parser("best", help="print the best configuration's launch script")
    best.add_argument("dir")
    sub.add_parser("spaces", help="list the shipped search spaces")
    knobs = sub.add_parser("knobs", help="the knob catalogue (Markdown); --check holds it "
                           "against the installed SGLang")
    knobs.add_argument("--check", action="store_true", help="list catalogue entries the "
                       "installed SGLang lacks and its communication levers the catalogue "
                       "lacks (exit 1 when one is unexplained)")
    knobs.add_argument("--server-cmd", help="the command that runs SGLang (its interpreter "
                       "is read); default: sglang serve")
    knobs.add_argument("--python", help="the interpreter that runs SGLang")
    prof = sub.add_parser("profile", help="where the verify time goes: profile the baseline "
                          "and the chosen (or a given) config of an experiment")
    prof.add_argument("dir")
    prof.add_argument("--config", metavar="JSON", help="profile this config instead of the "
                      "chosen one: a JSON object of knob -> value, or @file.json")
    prof.add_argument("--pin", action="append", default=[], metavar="NAME=VALUE",
                      help="a knob of the config to profile (repeatable), over the baseline")
    prof.add_argument("--label", help="the given config's name (default: config)")
    prof.add_argument("--no-baseline", action="store_true", help="do not profile the baseline")
    prof.add_argument("--steps", type=int, default=10, help="verify steps profiled per config")
    return parser


COMMANDS = {"run": cmd_run, "plan": cmd_plan, "report": cmd_report, "best": cmd_best,
            "spaces": cmd_spaces, "profile": cmd_profile, "knobs": cmd_knobs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = glue_raw_values(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["run", *argv])
    try:
        return COMMANDS[args.command](args)
    except (CliError, SpecError, SpaceError) as err:
        print(f"servetune: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValidationError as err:
        print(f"servetune: error: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # a Ctrl-C outside Ray Tune's own handling (start, end)
        print("servetune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
