"""The commands: each takes parsed arguments, checks what can be checked before anything
starts (bad input raises CliError: one line, exit 2), then calls the engine."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchers.registry import screenable
from search_spaces import knobs
from search_spaces.searches import strategy
from search_spaces.space import SearchSpace, load, preset_names
from tuner.cli.args import CliError, knob_named, parse_pins, parse_value, spec_from_args
from tuner.cli.nodes import check_nodes, command_lines
from tuner.record.files import BROKEN_JSON
from tuner.record.info import read_launch_script
from tuner.record.spec_file import has_spec, load_spec, save_spec
from tuner.setup import Setup, prepare
from tuner.spec import ExperimentSpec

if TYPE_CHECKING:
    from tuner.run.lock import DriverLock


def check_before_launch(spec: ExperimentSpec, *, planning: bool = False,
                        resume: bool = False) -> list[str]:
    """Everything that can be checked without starting Ray; returns notes for a plan (what
    would be an error for ``run``, such as too few GPUs here, is a note for ``plan``)."""
    from tuner.cli import traffic
    from tuner.run.cluster import check_address, check_joining, local_gpu_count

    # The cluster's address first: a socket, not SGLang's import (~8 s of CPU, asked last)
    check_joining(spec)
    if spec.address is not None and not planning:
        check_address(spec.address)
    setup = prepare(spec)
    base = setup.space.baseline()
    problems = setup.space.validate(base)
    if problems:
        raise CliError(f"the baseline is invalid: {problems[0]}")
    try:
        setup.workload.inputs(spec.seed)
    except ValueError as err:
        raise CliError(str(err)) from None
    traffic.check_limits(setup)
    traffic.check_study(spec, setup, resume=resume, planning=planning)
    if not planning:
        traffic.check_callbacks(spec)
    node_gpus = spec.gpus_per_trial or local_gpu_count(spec)
    notes = check_nodes(spec, setup.placement, node_gpus, planning=planning)
    shortfall = None if setup.placement.across_nodes else spec.workload.gpu_shortfall(node_gpus)
    if shortfall and not planning:
        raise CliError(shortfall)
    if shortfall:
        notes.append(f"planned as given, but this machine has fewer GPUs: {shortfall}")
    if spec.screen is not None:
        from tuner.run.screen import screen_shape

        if not screenable(spec.workload):
            raise CliError("--screen proxy screens for a server workload: give --model")
        screen_shape(spec)
    # The workload's own checks last: SGLang's parser costs ~8 s of CPU, every check above a
    # fraction of a second, so a mistyped flag is answered at once
    problems = spec.workload.checks(setup.space, spec.marker_id)
    if problems:
        raise CliError(problems[0])
    return notes


def cmd_run(args: argparse.Namespace) -> int:
    from tuner.run.lock import ExperimentBusy, holder

    if args.resume:
        folder = Path(args.resume).resolve()
        spec = load_spec(folder).model_copy(update={"out_dir": folder})
        lock = hold(folder)
        if (folder / BROKEN_JSON).exists():
            raise CliError(f"{args.resume}: this search stopped because its environment was "
                           f"broken ({BROKEN_JSON}): fix it and start a new experiment")
        resume = True
    else:
        spec = spec_from_args(args)
        running = holder(spec.out_dir)
        if running is not None:
            raise CliError(str(ExperimentBusy(spec.out_dir, running)))
        if has_spec(spec.out_dir):
            raise CliError(f"{spec.out_dir} already holds an experiment: use --resume "
                           f"{spec.out_dir} or another --out")
        resume = False
        lock = None
    try:
        check_before_launch(spec, resume=resume)
        lock = lock or hold(spec.out_dir)
        save_spec(spec)  # resumable from here on, whenever the driver is killed
        if spec.address is not None and args.address is None and not args.resume:
            print(f"Ray: joining the cluster at {spec.address} (from RAY_ADDRESS)", flush=True)
        if spec.screen is not None:
            from tuner.run.screen import run_screened

            outcome = run_screened(spec, resume=resume)
        else:
            from tuner.run import experiment  # Ray: imported once the folder can be resumed

            outcome = experiment.run(spec, resume=resume)
    finally:
        if lock is not None:
            lock.release()
    if outcome.interrupted:  # before the environment's verdict: a stop can fail a launch
        return 130
    return 1 if outcome.broken_environment else 0


def hold(folder: Path) -> DriverLock:
    """This process becomes the experiment's one driver (bad input if another one is)."""
    from tuner.run.lock import DriverLock, ExperimentBusy

    try:
        return DriverLock(folder).acquire()
    except ExperimentBusy as err:
        raise CliError(str(err)) from None


def cmd_plan(args: argparse.Namespace) -> int:
    """What ``run`` would launch, through the same search stack, launching nothing."""
    from tuner.search.build import build_search, proposals

    spec = spec_from_args(args)
    notes = check_before_launch(spec, planning=True)
    setup = prepare(spec)
    stack = build_search(setup.space, setup.objective, search=spec.search,
                         stage_search=spec.stage_search, samples=spec.samples, seed=spec.seed,
                         failure_aware=spec.failure_aware, max_concurrent=1, out_dir=None,
                         points=spec.points or None, weights=setup.weights,
                         workload=setup.workload.kind, nodes=setup.placement.nodes)
    port = spec.workload.port or spec.workload.production_port or 30000
    if not args.json:
        for note in [*notes, *stack.notes]:
            print(f"# {note}")
        if strategy(spec.search).adaptive:
            print(f"# {spec.search}: later proposals depend on measured results; shown as "
                  "proposed before any result (staged: earlier stages' winners = baseline)")
    for index, (trial_id, config) in enumerate(proposals(stack, stack.num_samples)):
        reasons = setup.space.validate(config)
        plan = setup.workload.plan(config, setup.context(trial_id, port=port))
        stage = stack.stage_of(trial_id)
        warnings = setup.space.warnings(config)
        entry: dict[str, Any] = {"index": index, "stage": stage, "config": config,
                                 "argv": list(plan.argv), "env": dict(plan.env),
                                 "unset_env": list(plan.unset_env), "valid": not reasons,
                                 "reason": "; ".join(reasons) or None, "warnings": warnings,
                                 "notes": list(plan.notes)}
        if plan.peers:  # a trial across nodes: the other nodes' commands
            entry["peers"] = [{"argv": list(p.argv), "env": dict(p.env)} for p in plan.peers]
        if args.json:
            print(json.dumps(entry, default=str))
            continue
        label = "baseline" if index == 0 else f"config {index}"
        label += f" (stage {stage})" if stage else ""
        print(f"# {label}" + ("" if not reasons else f"  INVALID: {entry['reason']}"))
        for warning in warnings:
            print(f"# warning: {warning}")
        for line in command_lines(plan):
            print(line)
        print()
    if not args.json:
        for line in [*setup.space_notes(), *setup.weights.lines()]:
            print(f"# {line}")
    return 0


def load_setup(folder: Path) -> Setup:
    # The folder as given wins over the path saved in it (a copied or moved experiment).
    return prepare(load_spec(folder).model_copy(update={"out_dir": folder.resolve()}))


def cmd_report(args: argparse.Namespace) -> int:
    """The summary, and DIR/report.html + DIR/plots/*.png + DIR/best/report.md from disk."""
    from tuner.decide.confirm import open_stage
    from tuner.decide.sequential import Plan
    from tuner.output import broken, confirm_text
    from tuner.output.readiness import campaign
    from tuner.output.results import search_rows, summary_lines, write_table
    from tuner.record.experiment import Experiment
    from tuner.record.rows import rows_of
    from tuner.run.finish import ReportError, decision_data, write_reports
    from tuner.run.lock import holder

    setup = load_setup(Path(args.dir))
    exp = Experiment.load(setup.out_dir)  # the folder, read once
    # During a run its driver owns the trials' records: in-flight trials read as running.
    df = write_table(setup.out_dir, setup.objective, setup.space.baseline(),
                     running=holder(setup.out_dir) is not None, exp=exp)
    if df.empty:
        raise CliError(f"{args.dir}: no trial has been recorded yet")
    for line in summary_lines(search_rows(df), setup.objective, list(setup.space.domains)):
        print(line)
    environment = exp.broken
    for line in broken.lines(environment, setup.out_dir) if environment else []:
        print(line)
    interim = [] if exp.confirm else open_stage(
        rows_of(df), exp.settings(), setup.objective.mode, Plan(cap=max(setup.spec.confirm, 1)))
    data = exp.confirm or decision_data(
        setup, df, "the confirm stage was interrupted" if interim else "no confirm stage ran", exp)
    for line in interim + confirm_text.lines(data):
        print(line)
    for line in campaign(exp, df).lines():
        print(line)
    try:
        written = write_reports(setup, df, data, exp)
    except ReportError as err:
        print(f"servetune: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    plots = sorted((setup.out_dir / "plots").glob("*.png"))
    print(f"wrote {len(plots)} plots in {setup.out_dir / 'plots'}: "
          f"{', '.join(p.name for p in plots)}")
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    load_setup(folder)
    script = read_launch_script(folder)
    if script is None:
        raise CliError(f"{folder}: no best configuration yet")
    print(script, end="")
    return 0


def given_config(args: argparse.Namespace, space: SearchSpace) -> dict[str, knobs.Value] | None:
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
                canonical = knob_named(str(name), space).name
            except CliError as err:
                raise CliError(f"--config: {err}") from None
            config[canonical] = parse_value(canonical, value, space) if isinstance(value, str) \
                else value
    config.update(parse_pins(args.pin, space))
    return config


def cmd_profile(args: argparse.Namespace) -> int:
    from tuner.run import profile

    setup = load_setup(Path(args.dir))
    if args.steps < 1:
        raise CliError("--steps: at least 1")
    if setup.placement.across_nodes:
        raise CliError(f"{args.dir}: its trials span {setup.placement.nodes} nodes; "
                       "profile runs on one node")
    targets = profile.experiment_targets(setup, given_config(args, setup.space), args.label,
                                         baseline=not args.no_baseline)
    if not targets:
        raise CliError(f"{setup.out_dir}: nothing to profile (no best.json): give --config "
                       "or --pin")
    for target in targets:
        problems = setup.space.validate(target.config)
        if problems:
            raise CliError(f"{target.label}: {problems[0]}")
    with hold(setup.out_dir):  # it launches servers: not while a run drives the folder
        doc = profile.profile_experiment(setup, targets, steps=args.steps)
    return 0 if any(e.ok for e in doc.entries) else 1


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


def cmd_knobs(args: argparse.Namespace) -> int:
    """The knob catalogue as a Markdown table; with --check, the catalogue held against the
    installed SGLang (exit 1 when it finds a lever it cannot explain)."""
    if not args.check:
        from search_spaces.table import knob_table

        print(knob_table(), end="")
        return 0
    from launchers.sglang import levers, preflight

    words = shlex.split(args.server_cmd) if args.server_cmd else ["sglang", "serve"]
    python = args.python or preflight.python_for(words)
    try:
        report = levers.check_catalogue(python=python)
    except preflight.SGLangUnavailable as err:
        raise CliError(f"knobs --check: {err}") from None
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
