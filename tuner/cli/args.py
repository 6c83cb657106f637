"""Strings become objects here: command-line words -> knob values, pins, workload args and the
ExperimentSpec. Paths a user types mean what they mean in the user's shell: they are
resolved against the folder servetune was started in (trials run in Ray's own folders)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from launchers import options
from launchers.options import CliOption
from launchers.registry import args_model, kind_for, kinds, screen_shape_option
from search_spaces import knobs
from search_spaces.space import SearchSpace, load, preset_names
from tuner.cli.baseline import user_baseline
from tuner.spec import ExperimentSpec
from tuner.stats import finite


class CliError(Exception):
    """Bad input: one line, exit 2."""


# Flags whose value may itself start with '--' (argparse would read it as an option).
RAW_VALUE_FLAGS = ("--server-arg", "--server-cmd")


def glue_raw_values(argv: Sequence[str]) -> list[str]:
    """``--server-arg --enable-foo`` -> ``--server-arg=--enable-foo``."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word in RAW_VALUE_FLAGS else None
        out.append(word if value is None else f"{word}={value}")
    return out


# ---------------------------------------------------------------- knob values and pins


def knob_named(name: str, space: SearchSpace | None = None) -> knobs.Knob:
    """The knob a user means: one the space declares, else the catalogue's (its spellings:
    ``NCCL_ALGO``, ``--enable-symm-mem``, ``enable-symm-mem``)."""
    if space is not None and name in space.open_knobs:
        return space.open_knobs[name]
    try:
        return knobs.get(name)
    except knobs.UnknownKnob as err:
        raise CliError(str(err)) from None


def parse_value(name: str, text: str, space: SearchSpace | None = None) -> knobs.Value:
    """A knob value from the command line, typed by the knob's domain."""
    knob = knob_named(name, space)
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


def parse_pins(items: Sequence[str], space: SearchSpace | None = None
               ) -> dict[str, knobs.Value]:
    pins: dict[str, knobs.Value] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--pin {item!r}: expected NAME=VALUE")
        try:
            knob = knob_named(name.strip(), space)
        except CliError as err:
            raise CliError(f"--pin: {err}") from None
        pins[knob.name] = parse_value(knob.name, value, space)
    return pins


# ---------------------------------------------------------------- paths


def user_path(text: str, base: Path) -> str:
    """A path as the user's shell means it: ``~`` expanded, relative to ``base``."""
    path = Path(text).expanduser()
    return str(path if path.is_absolute() else (base / path))


def looks_like_path(text: str) -> bool:
    """A model argument that names a folder rather than a hub id ('org/name')."""
    return text.startswith(("/", ".", "~")) or text.count("/") != 1 or Path(text).exists()


def resolve_command(words: Sequence[str], base: Path) -> list[str]:
    """``--server-cmd``: a program given with a folder (``./serve.sh``, ``.venv/bin/python``)
    and arguments naming existing files (``serve.py``) become absolute; a bare program name
    is looked up on PATH as the shell would, and stays as typed."""
    out: list[str] = []
    for i, word in enumerate(words):
        if i == 0:
            out.append(user_path(word, base) if "/" in word or word.startswith("~") else word)
        elif not word.startswith("-") and (base / Path(word).expanduser()).exists() \
                and not Path(word).is_absolute():
            out.append(user_path(word, base))
        else:
            out.append(word)
    return out


def missing_program(words: Sequence[str]) -> str | None:
    """Why the command's program cannot be run (None: it can, as far as can be told)."""
    program = words[0] if words else ""
    if "/" in program:
        return None if os.access(program, os.X_OK) else f"{program}: not an executable file"
    return None if shutil.which(program) else f"{program}: not found on PATH"


# ---------------------------------------------------------------- the workload's args

# How a workload's option's text becomes the value of its field (``CliOption.value``).
_READ: dict[str, Callable[[Any, Path, CliOption], Any]] = {
    options.TEXT: lambda v, _, __: v,
    options.WORDS: lambda v, _, __: [w for item in v for w in shlex.split(item)] or None,
    options.COMMAND: lambda v, base, _: resolve_command(shlex.split(v), base),
    options.INT_LIST: lambda v, _, o: int_list(v, o.flag),
    options.OFF: lambda v, _, __: False if v else None,
    options.MODEL: lambda v, base, _: user_path(v, base) if looks_like_path(v) else v,
    options.PATH_OR_NAME: lambda v, base, o: v if o.names and v in o.names()
    else user_path(v, base),
    options.ACCEPT_LENGTHS: lambda v, base, _: accept_table(user_path(v, base)),
}


def read_option(option: CliOption, value: Any, base: Path) -> Any:
    return _READ[option.value](value, base, option)


def accept_table(folder: str) -> list[dict[str, Any]]:
    """``--accept-length-from DIR``: the experiment's measured accept length per shape."""
    from tuner.output.acceptance import measured_acceptance

    try:
        return measured_acceptance(Path(folder))
    except ValueError as err:
        raise CliError(f"--accept-length-from {err}") from None


_LIMIT = re.compile(r"^\s*([A-Za-z0-9_.:-]+)\s*(<=|>=|<|>)\s*(\S+)\s*$")


def parse_limits(items: Sequence[str]) -> list[dict[str, Any]]:
    """``--limit "p99_itl_ms<=30"`` -> {metric, op, bound}."""
    out = []
    for item in items:
        match = _LIMIT.match(item)
        bound = finite(match.group(3)) if match else None
        if match is None or bound is None:
            raise CliError(f"--limit {item!r}: expected METRIC<=NUMBER (or >=, <, >), "
                           'e.g. "p99_itl_ms<=30"')
        out.append({"metric": match.group(1), "op": match.group(2), "bound": bound})
    return out


def storage_url(text: str | None, base: Path) -> str | None:
    """``--optuna-storage``: a SQLite file named relative to the user's folder becomes
    absolute (a resumed run reconnects from wherever it runs); other URLs stay as given."""
    if text is None:
        return None
    prefix = "sqlite:///"
    if text.startswith(prefix) and not text.startswith(prefix + "/") and \
            text != prefix + ":memory:":
        return prefix + user_path(text[len(prefix):], base)
    if "://" not in text:
        raise CliError(f"--optuna-storage {text!r}: expected a storage URL such as "
                       "sqlite:///runs/optuna.db")
    return text


def int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{flag} {text!r}: expected integers separated by commas") from None


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False and value not in ([], "")  # 0 is given


def workload_args(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """The workload's args from the options given: the workload the options select (or
    ``--workload``), each option mapped to its field; an option of another workload is bad
    input."""
    all_dests = {d for k in kinds() for d in args_model(k).cli_fields()}
    if getattr(args, "screen", None):  # --model-config then names the screen's shape
        all_dests.discard(screen_shape_option().dest)
    given = [d for d in sorted(all_dests) if _given(args, d)]
    kind = args.workload or kind_for(given)
    model = args_model(kind)
    fields = model.cli_fields()
    foreign = [d for d in given if d not in fields]
    if foreign:
        flags = ", ".join("--" + d.replace("_", "-") for d in foreign)
        raise CliError(f"{flags}: not an option of the {kind} workload")
    missing = [d for d in model.cli_selectors if d not in given]
    if missing:
        raise CliError(f"the {kind} workload needs {', '.join('--' + m for m in missing)}")
    data: dict[str, Any] = {"kind": kind, "workdir": str(base)}
    declared = {o.dest: o for o in model.cli_options}
    for dest in given:
        value = read_option(declared[dest], getattr(args, dest), base)
        if value is not None:
            data[fields[dest]] = value
    return data


# ---------------------------------------------------------------- the spec


def spec_from_args(args: argparse.Namespace, base: Path | None = None) -> ExperimentSpec:
    base = base or Path.cwd()
    shape = screen_shape_option()  # --model-config: the screen's shape
    space = args.space if args.space in preset_names() else user_path(args.space, base)
    loaded = load(space)  # bad input here is one line, before anything else
    out = Path(user_path(str(args.out), base)) if args.out else \
        base / "runs" / (args.name or f"servetune-{Path(args.space).stem}")
    out = out.resolve()
    if any(c in str(out) for c in "\n\r"):
        raise CliError(f"--out {str(out)!r}: a folder name with a line break")
    name = args.name or out.name
    if args.name is None and not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise CliError(f"--out {str(out)!r}: the folder name is not an experiment name "
                       "(letters, digits, '.', '_', '-'): pass --name")
    if 0 < args.confirm < 3:
        raise CliError(f"--confirm {args.confirm}: the confirm stage compares launch means from "
                       "3 launches each on; use 3 or more (or 0 to skip the stage)")
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    pins = parse_pins(args.pin, loaded)
    try:  # the user's own settings of searched knobs: the baseline
        baseline, workload = user_baseline(workload_args(args, base), loaded.with_pins(pins),
                                           parse_value)
    except ValueError as err:
        raise CliError(str(err)) from None
    data: dict[str, Any] = {
        "name": name, "out_dir": out, "space": space, "pins": pins, "baseline": baseline,
        "workload": workload, "search": args.search,
        "stage_search": args.stage_search, "samples": args.samples, "rounds": args.rounds,
        "scheduler": args.scheduler, "metric": args.metric, "mode": args.mode, "seed": args.seed,
        "failure_aware": not args.no_failure_aware, "gpus_per_trial": args.gpus_per_trial,
        "nodes_per_trial": args.nodes_per_trial,
        "num_gpus": args.num_gpus, "num_cpus": args.num_cpus, "address": address,
        "dashboard": not args.no_dashboard, "confirm": args.confirm,
        "confirm_time": args.confirm_time, "launch_spread": args.launch_spread,
        **({"stop_grace": args.stop_grace} if args.stop_grace is not None else {}),
        "confirm_top": args.confirm_top, "screen": args.screen, "screen_top": args.screen_top,
        "screen_spread": args.screen_spread,
        "screen_samples": args.screen_samples, "profile": bool(getattr(args, "profile", False)),
        "weights": args.weights,
        "screen_model": read_option(shape, getattr(args, shape.dest), base)
        if args.screen and getattr(args, shape.dest) else None,
        "limits": parse_limits(args.limit),
        "optuna_storage": storage_url(args.optuna_storage, base),
        "callbacks": list(dict.fromkeys(args.callback)),
    }
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as err:
        raise CliError(flag_error(err)) from None
    measured = [spec.metric or spec.workload.build().default_metric,
                *(limit["metric"] for limit in data["limits"])]
    return spec.model_copy(update={"workload": spec.workload.with_measured(measured)})


def flag_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"] if not str(p).isdigit() and p not in kinds()]
    # a workload field is named by its option (objective_concurrency: --decide-at)
    option = {field: dest for k in kinds() for dest, field in args_model(k).cli_fields().items()}
    flag = "--" + option.get(loc[-1], loc[-1]).replace("_", "-") if loc else "input"
    return f"{flag}: {first['msg']}"
