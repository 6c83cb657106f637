"""Does best/nccl-tuner.csv do, through NVIDIA's example tuner plugin, what the env variables
did? The proxy runs once with the settings as env variables and once with
NCCL_TUNER_PLUGIN=<the built plugin> + NCCL_TUNER_CONFIG_FILE=<the rules> (NCCL_ALGO,
NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS unset), both with NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING. From NCCL's INFO logs it prints whether the plugin loaded,
which of its rules applied (and how often none matched), the algorithm/protocol/channels NCCL
ran per collective and size in each run, and the two verify_ms with their spread.

    # an experiment of the proxy workload: its decided config and its best/nccl-tuner.csv
    python -m benchmarks.tuner_plugin_check runs/my-exp --plugin /tmp/nccl/libnccl-tuner-example.so
    # or settings given here (over NCCL for every all-reduce); the rules are exported from the
    # env run's own log, the way servetune exports them
    python -m benchmarks.tuner_plugin_check --plugin /tmp/nccl/libnccl-tuner-example.so \\
        --model-config kimi-k2.5 --pin NCCL_PROTO=LL --pin NCCL_MAX_NCHANNELS=8

Building the plugin (never part of this repository), on the GPU machine, for the NCCL that
torch loads (``python -c "import torch; print(torch.cuda.nccl.version())"``):
    git clone --depth 1 --branch v<that version>-1 https://github.com/NVIDIA/nccl /tmp/nccl-src
    make -C /tmp/nccl-src/plugins/tuner/example   # -> libnccl-tuner-example.so
(a plugin newer than the NCCL that loads it is refused: the log then says "unsupported").
Before 2.29.7 the example indexes NCCL's cost table as an array of pointers and the proxy dies
of SIGSEGV at its first collective, before NCCL flushes a log line (NVIDIA/nccl#1974):
benchmarks/gpu_session.sh's plugin step applies 2.29.7's cast to a scratch copy first.

Needs the repository, torch and the built plugin; no Ray. ``--device cpu`` is a dry run of
the script itself (gloo: no NCCL, so no plugin either). Prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import gpu_ids, machine, with_root_on_path

with_root_on_path()

# SGLang's own all-reduce paths would send the small all-reduces around NCCL (custom
# all-reduce, fusion); these make every all-reduce an NCCL one, which is what the rules tune.
NCCL_PATHS = {"--disable-custom-all-reduce": True,
              "--enforce-disable-flashinfer-allreduce-fusion": True}
RULE_ENV = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
PLUGIN_ENV = ("NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE")
_NUMBERS = re.compile(r"\d+")
# NCCL's and the example plugin's own INFO texts (src/plugin/tuner*.cc, plugins/tuner/example).
LOADED = re.compile(r"Successfully loaded external tuner plugin (\S+)|TUNER/Plugin: Using (.+)")
REFUSED = re.compile(r"External tuner plugin .* is unsupported|Config file \S+ not found|"
                     r"Failed to|could not|Could not find")
APPLIED = re.compile(r"TUNER/ExamplePlugin: Applied config for collType=(\w+), bytes=(\d+),"
                     r".*?algo=(\w+), proto=(\w+), channels=(\w+)")
NO_MATCH = "TUNER/ExamplePlugin: No matching config found"
RULES_LOADED = re.compile(r"TUNER/ExamplePlugin: Loaded (\d+) tuning configurations")
NCCL_INFO = re.compile(r"NCCL INFO (.*)$")


@dataclass
class Run:
    label: str
    verify_ms: list[float] = field(default_factory=list)
    choices: list[tuple[str, int, str, str, int]] = field(default_factory=list)
    plugin_lines: list[str] = field(default_factory=list)
    effective: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    ready_s: float | None = None



def nccl_lines(folder: Path) -> list[str]:
    out = []
    for path in sorted(folder.glob("nccl.*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = NCCL_INFO.search(line)
            if match:
                out.append(match.group(1).strip())
    return out


def launch(label: str, workload: Any, config: Mapping[str, Any], extra_env: Mapping[str, str | None],
           args: argparse.Namespace, experiment: str) -> Run:
    """One launch the way a trial runs it (plan, preflight, start, ready, rounds, stop)."""
    from launchers import nccl_log
    from launchers.base import TrialContext
    from launchers.failures import TrialFailed
    from launchers.process import environ, free_port

    run = Run(label)
    folder = (args.out / label).absolute()
    shutil.rmtree(folder, ignore_errors=True)  # an earlier check's NCCL logs are not this one's
    ctx = TrialContext(experiment, label, folder, gpu_ids(args.ranks, args.device), free_port())
    with environ(extra_env):
        try:
            plan = workload.plan(dict(config), ctx)
            (folder / "plan.json").parent.mkdir(parents=True, exist_ok=True)
            (folder / "plan.json").write_text(json.dumps(plan.to_json(), indent=1, default=str))
            workload.preflight(plan, ctx)
            with workload.start(plan, ctx) as running:
                run.ready_s = running.wait_ready(args.ready_timeout)
                rounds = [running.measure(i) for i in range(args.rounds)]
                run.effective = running.effective()
        except TrialFailed as err:
            run.failure = f"{err.failure.kind.value}: {err.failure.message}"
            return run
    kept = rounds[1:] or rounds  # the first round carries the warm-up
    run.verify_ms = [float(r["verify_ms"]) for r in kept if r.get("verify_ms") is not None]
    eff = nccl_log.parse_files(nccl_log.debug_files(folder))
    run.choices = sorted({(c["collective"], c["bytes"], c["algo"], c["proto"], c["channels"])
                          for c in eff.choices})
    run.plugin_lines = [ln for ln in nccl_lines(folder) if "TUNER" in ln]
    return run


def plugin_summary(run: Run) -> list[str]:
    """What NCCL's log says the plugin did: loaded or not, rules loaded, rules applied."""
    lines = run.plugin_lines
    loaded = sorted({m.group(1) or m.group(2) for ln in lines if (m := LOADED.search(ln))})
    refused = sorted({ln for ln in lines if REFUSED.search(ln)})
    counts = [int(m.group(1)) for ln in lines if (m := RULES_LOADED.search(ln))]
    applied = Counter((m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5))
                      for ln in lines if (m := APPLIED.search(ln)))
    unmatched = sum(1 for ln in lines if NO_MATCH in ln)
    out = [f"plugin loaded: {'; '.join(loaded) if loaded else 'NO (no load line in the log)'}"]
    out += [f"plugin problem: {ln}" for ln in refused]
    if counts:
        out.append(f"rules loaded from the file: {max(counts)} (per communicator, every rank)")
    for (coll, nbytes, algo, proto, channels), n in sorted(applied.items()):
        out.append(f"rule applied: {coll} {nbytes} B -> {algo}/{proto} channels {channels} "
                   f"(x{n})")
    out.append(f"collectives no rule matched (1 channel, NCCL's choice): {unmatched}")
    other = Counter(_NUMBERS.sub("#", ln) for ln in lines
                    if not (LOADED.search(ln) or APPLIED.search(ln) or NO_MATCH in ln
                            or RULES_LOADED.search(ln) or REFUSED.search(ln)))
    out += [f"other plugin line (x{n}): {text[:140]}" for text, n in sorted(other.items())]
    return out


def stats(values: list[float]) -> str:
    if not values:
        return f"{'-':>9} {'-':>7} {'-':>19}"
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:9.3f} {sd:7.3f} {min(values):9.3f}..{max(values):<8.3f}"


def spread(values: list[float]) -> float | None:
    """(max - min) / mean, in percent."""
    if len(values) < 2:
        return None
    return 100.0 * (max(values) - min(values)) / statistics.fmean(values)


def verdict(env: list[float], plugin: list[float]) -> str:
    if not env or not plugin:
        return "verify ms: not measured in both runs"
    diff = 100.0 * (statistics.fmean(plugin) / statistics.fmean(env) - 1.0)
    noise = max(s for s in (spread(env), spread(plugin), 0.0) if s is not None)
    within = "within noise" if abs(diff) <= noise else "OUTSIDE noise"
    return (f"verify ms: plugin {statistics.fmean(plugin):.3f} vs env {statistics.fmean(env):.3f} "
            f"({diff:+.2f}%; spread max-min/mean {noise:.2f}%): {within}")


def settings(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Path | None]:
    """(workload, config, the experiment's rules file or None) from the arguments."""
    from launchers.proxy.launcher import ProxyArgs
    from search_spaces.knobs import CATALOGUE
    from tuner.cli.args import parse_pins
    from tuner.record.spec_file import load_spec

    overrides = {"check_correctness": False, "iters_per_round": args.iters,
                 "device": args.device, "ranks": args.ranks}
    if args.experiment is not None:
        spec = load_spec(args.experiment)
        if not isinstance(spec.workload, ProxyArgs):
            raise SystemExit(f"tuner_plugin_check: {args.experiment} ran the "
                             f"{spec.workload.kind} workload: give a proxy experiment or --pin")
        best = json.loads((args.experiment / "best.json").read_text())
        config = {k: v for k, v in best["config"].items() if k in CATALOGUE}
        rules = args.experiment / "best" / "nccl-tuner.csv"
        return spec.workload.model_copy(update=overrides).build(), config, rules
    config = {**({} if args.sglang_paths else NCCL_PATHS), **parse_pins(args.pin)}
    workload = ProxyArgs(model=args.model_config, layers=args.layers, batch=args.batch,
                         kv_len=args.kv_len, **overrides).build()
    return workload, config, None


def has_rules(path: Path) -> bool:
    return any(ln[:1].isalpha() for ln in path.read_text().splitlines())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment", nargs="?", type=Path,
                   help="a proxy experiment folder (its best.json and best/nccl-tuner.csv)")
    p.add_argument("--plugin", required=True, help="the built example tuner plugin (.so)")
    p.add_argument("--pin", action="append", default=[], metavar="NAME=VALUE",
                   help="without an experiment: a setting of the config (repeatable)")
    p.add_argument("--sglang-paths", action="store_true", help="without an experiment: keep "
                   "SGLang's all-reduce paths (custom all-reduce, fusion) instead of NCCL")
    p.add_argument("--model-config", default="kimi-k2.5", help="shape preset or config.json")
    p.add_argument("--layers", type=int, help="default: all that fit")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--kv-len", type=int, default=4096)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--rounds", type=int, default=8, help="per launch; the first is not counted")
    p.add_argument("--iters", type=int, default=50, help="graph replays timed per round")
    p.add_argument("--repeats", type=int, default=1, help="env/plugin launch pairs, interleaved")
    p.add_argument("--ready-timeout", type=float, default=600.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/servetune-tuner-plugin-check"))
    args = p.parse_args()
    print(machine(), flush=True)
    plugin = Path(args.plugin).expanduser().absolute()
    if args.device == "cuda" and not plugin.is_file():
        print(f"tuner_plugin_check: --plugin {plugin}: no such file", file=sys.stderr)
        return 2
    from launchers.process import reap_all
    from tuner.output.tuner_csv import RULE_KNOBS, tuner_csv, tuner_rules

    workload, config, rules_file = settings(args)
    if not any(config.get(k) is not None for k in RULE_KNOBS):
        print(f"tuner_plugin_check: the settings leave {', '.join(RULE_KNOBS)} to NCCL: nothing "
              "for the plugin to do (without rules it runs every collective on one channel); "
              "check settings that set them (--pin, without an experiment)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    experiment = f"tuner-plugin-check-{os.getpid()}"
    plugin_config = {**config, **{k: None for k in RULE_KNOBS}}
    print(f"config (env run): {json.dumps(config, default=str)}", flush=True)
    runs: list[Run] = []
    began = time.monotonic()
    try:
        for rep in range(args.repeats):
            env = launch(f"env-{rep}", workload, config, {k: None for k in PLUGIN_ENV}, args,
                         experiment)
            runs.append(env)
            if rules_file is None or not has_rules(rules_file):
                if rules_file is not None:
                    print(f"{rules_file} holds no rules: exporting them from this env run")
                rules, notes = tuner_rules(config, env.effective, args.ranks)
                if not rules and args.device == "cuda":
                    print("no rules from the env run's NCCL log: " + "; ".join(notes))
                    return 1
                rules_file = args.out / "nccl-tuner.csv"
                rules_file.write_text(tuner_csv(rules, notes, experiment, f"launch {env.label}"))
            with_plugin = {"NCCL_TUNER_PLUGIN": str(plugin),
                           "NCCL_TUNER_CONFIG_FILE": str(rules_file.absolute())}
            runs.append(launch(f"plugin-{rep}", workload, plugin_config, with_plugin, args,
                               experiment))
    finally:
        reap_all(f"{experiment}/")
    assert rules_file is not None
    print(f"rules file: {rules_file}")
    for line in rules_file.read_text().splitlines():
        if line[:1].isalpha():
            print(f"  {line}")
    for run in runs:
        print(f"\n{run.label}: NCCL ran (collective bytes algo proto channels): "
              + ("; ".join(" ".join(map(str, c)) for c in run.choices) or "nothing logged"))
        if run.label.startswith("plugin"):
            for line in plugin_summary(run):
                print(f"  {line}")
    env_runs = [r for r in runs if r.label.startswith("env")]
    plugin_runs = [r for r in runs if r.label.startswith("plugin")]
    same = all(e.choices == q.choices for e, q in zip(env_runs, plugin_runs, strict=True))
    env_ms = [v for r in env_runs for v in r.verify_ms]
    plugin_ms = [v for r in plugin_runs for v in r.verify_ms]
    loaded = all(any(LOADED.search(ln) for ln in r.plugin_lines) for r in plugin_runs)
    applied = sum(1 for r in plugin_runs for ln in r.plugin_lines if APPLIED.search(ln))
    print(f"\nchecked in {time.monotonic() - began:.0f} s"
          + (" (device cpu: gloo, no NCCL: a dry run of this script)" if args.device == "cpu"
             else ""))
    print(f"{'run':<9} {'launches':>8} {'rounds':>6} {'verify_ms':>9} {'sd':>7} "
          f"{'min..max':>19}")
    for label, group, values in (("env", env_runs, env_ms), ("plugin", plugin_runs, plugin_ms)):
        failures = [r.failure for r in group if r.failure]
        print(f"{label:<9} {len(group):8d} {len(values):6d} {stats(values)}"
              + (f"  FAILED: {failures[0]}" if failures else ""))
    print(f"NCCL's choices (algorithm, protocol, channels per collective and size): "
          f"{'the same in both runs' if same else 'DIFFER between the runs'}")
    print(f"plugin: {'loaded' if loaded else 'NOT loaded'}, {applied} rule applications logged"
          + (" (a plugin that logs them below INFO shows none: NCCL's choices are the evidence)"
             if loaded and not applied else ""))
    print(verdict(env_ms, plugin_ms))
    failed = any(r.failure for r in runs)
    return 1 if failed or (args.device == "cuda" and not (loaded and same)) else 0


if __name__ == "__main__":
    sys.exit(main())
