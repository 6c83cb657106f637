"""`servetune run | plan | report | best | spaces`.

Bad input ends with one line on stderr and exit code 2, before anything is launched.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from launchers.base import TrialContext
from search_spaces import knobs
from search_spaces.space import SpaceError, load, preset_names
from tuner.spec import DEFAULT_PRESET, ExperimentSpec, SpecError, one_line

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """Bad input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"servetune: error: {message} (see {self.prog} --help)\n")


# Flags whose value may itself start with '--' (argparse would read it as an option).
_RAW_VALUE_FLAGS = ("--server-arg", "--server-cmd")


def _glue_raw_values(argv: Sequence[str]) -> list[str]:
    """``--server-arg --enable-foo`` -> ``--server-arg=--enable-foo``."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word in _RAW_VALUE_FLAGS else None
        out.append(word if value is None else f"{word}={value}")
    return out


def parse_value(name: str, text: str) -> knobs.Value:
    """A knob value from the command line, typed by the knob's domain."""
    knob = knobs.get(name)
    lowered = text.strip().lower()
    if lowered in ("default", "unset"):
        return knob.unset
    if knob.is_switch:
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise CliError(f"{knob.name}: expected true or false, got {text!r}")
    if any(isinstance(c, int) and not isinstance(c, bool) for c in knob.choices):
        try:
            return int(text, 0)
        except ValueError:
            raise CliError(f"{knob.name}: expected an integer, got {text!r}") from None
    return text


def parse_pins(items: Sequence[str]) -> dict[str, knobs.Value]:
    pins: dict[str, knobs.Value] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--pin {item!r}: expected NAME=VALUE")
        try:
            canonical = knobs.canonical_name(name.strip())
        except knobs.UnknownKnob as err:
            raise CliError(f"--pin: {err}") from None
        pins[canonical] = parse_value(canonical, value)
    return pins


# ---------------------------------------------------------------- arguments


def _add_experiment_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search")
    g.add_argument("--space", default=DEFAULT_PRESET, help="preset name or YAML file")
    g.add_argument("--pin", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a knob (repeatable), e.g. NCCL_NVLS_ENABLE=0")
    g.add_argument("--search", choices=["random", "grid", "optuna", "staged"], default="random")
    g.add_argument("--stage-search", choices=["random", "grid", "optuna"], default="random",
                   help="searcher inside each stage of --search staged")
    g.add_argument("--samples", type=int, default=12, help="trials, the baseline included")
    g.add_argument("--rounds", type=int, default=6, help="benchmark rounds per trial")
    g.add_argument("--scheduler", choices=["asha", "median", "fifo"], default="asha")
    g.add_argument("--metric", help="default: the workload's (output_tok_s / est_tok_s)")
    g.add_argument("--mode", choices=["max", "min"])
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--screen", choices=["proxy"],
                   help="sglang: screen the NCCL knobs on the proxy first, then run the top "
                   "--screen-top settings as server trials")
    g.add_argument("--screen-top", type=int, default=3)
    g.add_argument("--screen-samples", type=int, help="proxy trials in the screen")
    g.add_argument("--no-failure-aware", action="store_true",
                   help="do not avoid values that failed the same way twice")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=["proxy", "sglang"],
                   help="default: sglang when --model is given, else the proxy")
    w.add_argument("--model", help="sglang: model path (or hub id org/name)")
    w.add_argument("--draft-model", help="sglang: speculative draft model path")
    w.add_argument("--tp", type=int, help="sglang: tensor parallel size (default: all GPUs)")
    w.add_argument("--speculative-algorithm", help="sglang: e.g. EAGLE3")
    w.add_argument("--server-arg", action="append", default=[], metavar="ARGS",
                   help="extra server arguments (repeatable; shell-split)")
    w.add_argument("--server-cmd", help="replaces 'sglang serve' (a venv, a container, a stand-in)")
    w.add_argument("--port", type=int, help="server port (sglang default 30000; 0: free port)")
    w.add_argument("--ready-timeout", type=float, help="seconds to wait for readiness")
    w.add_argument("--stop-grace", type=float, help="seconds between SIGTERM and SIGKILL when "
                   "a server stops (default 10)")
    w.add_argument("--input-len", type=int)
    w.add_argument("--output-len", type=int)
    w.add_argument("--concurrency", help="comma list; the first is the objective")
    w.add_argument("--requests-per-round", type=int)
    w.add_argument("--no-nccl-debug", action="store_true",
                   help="sglang: no NCCL_DEBUG=INFO logs (no effective-settings check)")
    w.add_argument("--no-preflight", action="store_true",
                   help="sglang: skip the check against SGLang's own argument parser")
    w.add_argument("--model-config", help="proxy: shape preset or config.json")
    w.add_argument("--layers", type=int, help="proxy: run N layers and scale")
    w.add_argument("--batch", type=int, help="proxy: requests in the verify batch")
    w.add_argument("--kv-len", type=int, help="proxy: KV cache length")
    r = p.add_argument_group("resources")
    r.add_argument("--gpus-per-trial", type=int, help="default: all GPUs of a node")
    r.add_argument("--num-gpus", type=int, help="GPUs to declare to a local Ray")
    r.add_argument("--num-cpus", type=int, help="CPUs to declare to a local Ray")
    r.add_argument("--address", help="an existing Ray cluster (HOST:PORT)")
    r.add_argument("--no-dashboard", action="store_true")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, help="experiment folder (default runs/<name>)")
    o.add_argument("--name", help="experiment name (default: the folder's name)")
    o.add_argument("--confirm", type=int, default=3, metavar="R",
                   help="after the search, launch the top configs and the baseline R more times "
                   "each and keep a config only if its 95%% interval clears the baseline's "
                   "(default 3; 0 skips the stage)")
    o.add_argument("--confirm-top", type=int, default=3, metavar="K",
                   help="configs the confirm stage re-runs besides the baseline (default 3)")


def _workload(args: argparse.Namespace) -> dict[str, Any]:
    kind = args.workload or ("sglang" if args.model else "proxy")
    if kind == "sglang":
        if not args.model:
            raise CliError("the sglang workload needs --model")
        _check_model_path(args.model)
        data: dict[str, Any] = {"kind": "sglang", "model": args.model}
        server_args = [w for item in args.server_arg for w in shlex.split(item)]
        optional = {"draft_model": args.draft_model, "tp": args.tp,
                    "speculative_algorithm": args.speculative_algorithm,
                    "port": args.port, "ready_timeout": args.ready_timeout,
                    "input_len": args.input_len, "output_len": args.output_len,
                    "requests_per_round": args.requests_per_round}
        data.update({k: v for k, v in optional.items() if v is not None})
        if args.draft_model:
            _check_model_path(args.draft_model)
        if server_args:
            data["server_args"] = server_args
        if args.server_cmd:
            data["server_cmd"] = shlex.split(args.server_cmd)
        if args.concurrency:
            data["concurrency"] = _int_list(args.concurrency, "--concurrency")
        if args.no_nccl_debug:
            data["nccl_debug"] = False
        if args.no_preflight:
            data["preflight"] = False
        return data
    sglang_only = [f for f, v in (("--model", args.model), ("--draft-model", args.draft_model),
                                  ("--server-arg", args.server_arg), ("--tp", args.tp))
                   if v]
    if sglang_only:
        raise CliError(f"{', '.join(sglang_only)}: only for the sglang workload")
    data = {"kind": "proxy"}
    optional = {"model": args.model_config, "layers": args.layers, "batch": args.batch,
                "kv_len": args.kv_len, "port": args.port, "ready_timeout": args.ready_timeout}
    data.update({k: v for k, v in optional.items() if v is not None})
    return data


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{flag} {text!r}: expected integers separated by commas") from None


def _check_model_path(model: str) -> None:
    """Paths must exist; a bare 'org/name' is a hub id and is left to the server."""
    looks_like_path = model.startswith(("/", ".", "~")) or model.count("/") != 1
    if looks_like_path and not Path(model).expanduser().exists():
        raise CliError(f"model path {model!r} does not exist")


def spec_from_args(args: argparse.Namespace) -> ExperimentSpec:
    out = (args.out or Path("runs") / (args.name or f"servetune-{args.space_name}")).resolve()
    if any(c in str(out) for c in "\n\r"):
        raise CliError(f"--out {str(out)!r}: a folder name with a line break")
    name = args.name or out.name
    if args.name is None and not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise CliError(f"--out {str(out)!r}: the folder name is not an experiment name "
                       "(letters, digits, '.', '_', '-'): pass --name")
    data: dict[str, Any] = {
        "name": name, "out_dir": out, "space": args.space, "pins": parse_pins(args.pin),
        "workload": _workload(args), "search": args.search, "stage_search": args.stage_search,
        "samples": args.samples, "rounds": args.rounds, "scheduler": args.scheduler,
        "metric": args.metric, "mode": args.mode, "seed": args.seed,
        "failure_aware": not args.no_failure_aware, "gpus_per_trial": args.gpus_per_trial,
        "num_gpus": args.num_gpus, "num_cpus": args.num_cpus, "address": args.address,
        "dashboard": not args.no_dashboard, "confirm": args.confirm,
        **({"stop_grace": args.stop_grace} if args.stop_grace is not None else {}),
        "confirm_top": args.confirm_top, "screen": args.screen, "screen_top": args.screen_top,
        "screen_samples": args.screen_samples, "profile": bool(getattr(args, "profile", False)),
        "screen_model": args.model_config if args.screen else None,
    }
    if args.confirm == 1:
        raise CliError("--confirm 1: one repeat gives no confidence interval; use 2 or more "
                       "(or 0 to skip the confirm stage)")
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as err:
        raise CliError(_flag_error(err)) from None


def _flag_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"] if not str(p).isdigit() and p not in ("sglang", "proxy")]
    flag = "--" + loc[-1].replace("_", "-") if loc else "input"
    return f"{flag}: {first['msg']}"


def check_before_launch(spec: ExperimentSpec) -> None:
    """Everything that can be checked without starting Ray."""
    from tuner.experiment import check_address, local_gpu_count, prepare

    setup = prepare(spec)
    base = setup.space.baseline()
    problems = setup.space.validate(base)
    if problems:
        raise CliError(f"the baseline is invalid: {problems[0]}")
    args = spec.workload
    if args.kind == "sglang":
        from launchers.sglang.launcher import conflicting_server_args

        conflicts = conflicting_server_args(args.server_args, list(knobs.CATALOGUE))
        if conflicts:
            raise CliError(f"--server-arg {conflicts[0]}")
        gpus = local_gpu_count(spec)
        node_gpus = spec.gpus_per_trial or gpus
        if args.tp is not None and node_gpus is not None and args.tp > node_gpus:
            raise CliError(f"--tp {args.tp} is larger than the {node_gpus} GPUs a node has")
    if spec.screen is not None:
        from tuner.screen import screen_shape

        if spec.workload.kind != "sglang":
            raise CliError("--screen proxy screens for the sglang workload: give --model")
        screen_shape(spec)
    if spec.address is not None:
        check_address(spec.address)


# ---------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from tuner import experiment

    if args.resume:
        folder = Path(args.resume).resolve()
        spec = ExperimentSpec.load(folder).model_copy(update={"out_dir": folder})
        if not (Path(args.resume) / "tuner.pkl").exists():
            raise CliError(f"{args.resume}: the experiment never started (no tuner.pkl)")
        resume = True
    else:
        spec = spec_from_args(args)
        if (spec.out_dir / "servetune.json").exists():
            raise CliError(f"{spec.out_dir} already holds an experiment: use --resume "
                           f"{spec.out_dir} or another --out")
        resume = False
    check_before_launch(spec)
    if spec.screen is not None:
        from tuner.screen import run_screened

        outcome = run_screened(spec, resume=resume)
    else:
        outcome = experiment.run(spec, resume=resume)
    return 130 if outcome.interrupted else 0


def cmd_plan(args: argparse.Namespace) -> int:
    from tuner.experiment import prepare
    from tuner.searchers import SpaceSearcher

    spec = spec_from_args(args)
    check_before_launch(spec)
    setup = prepare(spec)
    strategy = "grid" if spec.search == "grid" else "random"
    searcher = SpaceSearcher(setup.space, strategy, spec.seed)
    count = min(spec.samples, setup.space.size) if strategy == "grid" else spec.samples
    for index in range(count):
        config = searcher.suggest(f"plan_{index:05d}")
        if not isinstance(config, dict):
            break
        reasons = setup.space.validate(config)
        ctx = TrialContext(spec.name, f"plan_{index:05d}", spec.out_dir / f"plan_{index:05d}",
                           (), getattr(spec.workload, "port", None) or 30000, spec.seed)
        plan = setup.workload.plan(config, ctx)
        warnings = setup.space.warnings(config)
        entry: dict[str, Any] = {"index": index, "config": config, "argv": list(plan.argv),
                                 "env": dict(plan.env),
                 "unset_env": list(plan.unset_env), "valid": not reasons,
                 "reason": "; ".join(reasons) or None, "warnings": warnings}
        if args.json:
            print(json.dumps(entry, default=str))
            continue
        label = "baseline" if index == 0 else f"config {index}"
        print(f"# {label}" + ("" if not reasons else f"  INVALID: {entry['reason']}"))
        for warning in warnings:
            print(f"# warning: {warning}")
        for key, value in sorted(plan.env.items()):
            print(f"{key}={shlex.quote(value)} \\")
        print(" ".join(shlex.quote(a) for a in plan.argv))
        print()
    if setup.dropped and not args.json:
        print(f"# not modelled by the {setup.workload.kind} workload: {', '.join(setup.dropped)}")
    return 0


def _load_setup(folder: Path) -> Any:
    from tuner.experiment import prepare

    # The folder as given wins over the path saved in it (a copied or moved experiment).
    return prepare(ExperimentSpec.load(folder).model_copy(update={"out_dir": folder.resolve()}))


def cmd_report(args: argparse.Namespace) -> int:
    """The summary, and DIR/report.html + DIR/plots/*.png + DIR/best/report.md from disk."""
    from tuner import confirm, finish, results

    setup = _load_setup(Path(args.dir))
    df = finish.write_table(setup)
    if df.empty:
        raise CliError(f"{args.dir}: no trial has been recorded yet")
    for line in results.summary_lines(confirm.search_rows(df), setup.objective,
                                      list(setup.space.domains)):
        print(line)
    data = confirm.load(setup.spec.out_dir) or {
        "metric": setup.objective.metric, "mode": setup.objective.mode, "entries": [],
        "decision": finish.search_decision(setup, df, "no confirm stage ran")}
    for line in confirm.lines(data):
        print(line)
    try:
        written = finish.write_reports(setup, df, data)
    except finish.ReportError as err:
        print(f"servetune: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    plots = sorted((setup.spec.out_dir / "plots").glob("*.png"))
    print(f"wrote {len(plots)} plots in {setup.spec.out_dir / 'plots'}: "
          f"{', '.join(p.name for p in plots)}")
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    _load_setup(folder)
    script = folder / "best" / "launch.sh"
    if not script.exists():
        raise CliError(f"{folder}: no best configuration yet")
    print(script.read_text(), end="")
    return 0


def _given_config(args: argparse.Namespace) -> dict[str, knobs.Value] | None:
    """``servetune profile --config JSON|@file --pin NAME=VALUE``: knob name -> value."""
    if not args.config and not args.pin:
        return None
    config: dict[str, knobs.Value] = {}
    if args.config:
        text = args.config
        if text.startswith("@"):
            try:
                text = Path(text[1:]).read_text()
            except OSError as err:
                raise CliError(f"--config {args.config}: {err.strerror or err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise CliError(f"--config: not JSON ({err})") from None
        if not isinstance(data, dict):
            raise CliError("--config: expected a JSON object of knob name -> value")
        for name, value in data.items():
            try:
                canonical = knobs.canonical_name(str(name))
            except knobs.UnknownKnob as err:
                raise CliError(f"--config: {err}") from None
            config[canonical] = parse_value(canonical, value) if isinstance(value, str) else value
    config.update(parse_pins(args.pin))
    return config


def cmd_profile(args: argparse.Namespace) -> int:
    from tuner import profile
    from tuner.experiment import prepare

    folder = Path(args.dir).resolve()
    setup = prepare(ExperimentSpec.load(folder).model_copy(update={"out_dir": folder}))
    if args.steps < 1:
        raise CliError("--steps: at least 1")
    targets = profile.experiment_targets(setup, _given_config(args), args.label,
                                         baseline=not args.no_baseline)
    if not targets:
        raise CliError(f"{folder}: nothing to profile (no best.json): give --config or --pin")
    for target in targets:
        problems = setup.space.validate(target.config)
        if problems:
            raise CliError(f"{target.label}: {problems[0]}")
    doc = profile.profile_experiment(setup, targets, steps=args.steps)
    return 0 if any(e["status"] == "ok" for e in doc["entries"]) else 1


def cmd_spaces(args: argparse.Namespace) -> int:
    for name in preset_names():
        space = load(name)
        valid = space.valid_size()
        stages = f", {len(space.stages)} stages" if space.stages else ""
        print(f"{name:<18} {space.size:>7} points ({valid if valid is not None else '?'} valid)"
              f"{stages}: {' '.join(space.description.split())}")
        print(f"{'':<18} knobs: {', '.join(space.domains)}; pinned: "
              f"{', '.join(f'{k}={v}' for k, v in space.pins.items()) or 'none'}")
    return 0


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
            "spaces": cmd_spaces, "profile": cmd_profile}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = _glue_raw_values(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["run", *argv])
    if hasattr(args, "space"):
        args.space_name = Path(args.space).stem
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
