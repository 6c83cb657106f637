"""Multi-fidelity search: screen the NCCL part of the space on the proxy (seconds a trial),
then launch only the top k settings as full server trials (minutes a trial), and say how
well the proxy's ranking held up on the server (Spearman rank correlation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from launchers.registry import screen_args
from search_spaces import knobs
from search_spaces.space import load
from tuner.output.files import write_json
from tuner.output.results import configs
from tuner.run.experiment import run
from tuner.run.finish import RunOutcome
from tuner.run.fit import started
from tuner.setup import Print, prepare, stdout_print
from tuner.spec import ExperimentSpec, SpecError

SCREEN_DIR = "screen"
SCREEN_JSON = "screen.json"


def screen_shape(spec: ExperimentSpec) -> str:
    """The proxy's shape: --model-config, else the server model folder's config.json."""
    shape = spec.screen_model or spec.workload.shape_source()
    if shape is None:
        raise SpecError("--screen proxy needs the model's shape: a local --model folder with a "
                        "config.json, or --model-config PRESET|config.json")
    return shape


def screened(knob: knobs.Knob) -> bool:
    """What the screen varies: NCCL's own environment (the server's flags and SGLang's env
    levers stay at their defaults on the proxy)."""
    return knob.kind is knobs.KnobKind.ENV and knob.source is knobs.Source.NCCL


def screen_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The proxy experiment over the NCCL knobs; everything else stays at its default."""
    space = load(spec.space).with_pins(spec.pins)
    non_env = {n: space.knob(n).unset for n in space.domains if not screened(space.knob(n))}
    return spec.model_copy(update={
        "name": f"{spec.name}-screen", "out_dir": spec.out_dir / SCREEN_DIR,
        "workload": screen_args(screen_shape(spec)), "screen": None, "points": [],
        "pins": {**spec.pins, **non_env}, "confirm": 0,
        "samples": spec.screen_samples or spec.samples,
        "search": "random" if spec.search in ("staged", "grid") else spec.search,
    })


def env_part(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in knobs.CATALOGUE and screened(knobs.CATALOGUE[k])}


def top_settings(table: pd.DataFrame, out_dir: Path, k: int, mode: str) -> list[dict[str, Any]]:
    """The k best screened NCCL settings (completed trials, baseline excluded)."""
    if table.empty:
        return []
    done = table[(table["status"] == "ok") & ~table["baseline"] & table["score"].notna()]
    done = done.sort_values("score", ascending=mode == "min")
    launched = configs(out_dir)
    picked: list[dict[str, Any]] = []
    for tid in done["trial_id"]:
        env = env_part(launched[tid])
        if env not in picked:
            picked.append(env)
        if len(picked) == k:
            break
    return picked


def rank_correlation(screen_dir: Path, screen_table: pd.DataFrame, server_dir: Path,
                     server_table: pd.DataFrame) -> dict[str, Any]:
    """Proxy score vs server score for the settings both measured."""
    def keyed(out_dir: Path, table: pd.DataFrame) -> dict[str, float]:
        launched = configs(out_dir)
        if "phase" in table:  # search trials only: not the confirm repeats or the reference
            table = table[table["phase"].fillna("search") == "search"]
        rows = table[(table["status"] == "ok") & table["score"].notna()]
        return {json.dumps(env_part(launched[t]), sort_keys=True, default=str): float(s)
                for t, s in zip(rows["trial_id"], rows["score"], strict=True)}

    proxy, server = keyed(screen_dir, screen_table), keyed(server_dir, server_table)
    common = [k for k in server if k in proxy]
    pairs = pd.DataFrame({"proxy": [proxy[k] for k in common],
                          "server": [server[k] for k in common]})
    # Spearman = Pearson on ranks (pandas' own spearman needs scipy).
    rho = float(pairs["proxy"].rank().corr(pairs["server"].rank())) if len(pairs) >= 3 \
        else None
    return {"settings": [json.loads(k) for k in common], "proxy": pairs["proxy"].tolist(),
            "server": pairs["server"].tolist(), "spearman": rho}


def run_screened(spec: ExperimentSpec, *, resume: bool = False,
                 echo: Print = stdout_print) -> RunOutcome:
    first = screen_spec(spec)
    echo(f"screen: the NCCL part of {spec.space} on the proxy ({first.workload.shape_source()}), "
         f"then the top {spec.screen_top} on the server")
    screen = run(first, resume=resume and started(first.out_dir), echo=echo)
    if screen.broken_environment:  # the proxy's baseline cannot run here: nor can the rest
        return screen
    setup = prepare(first)
    top = top_settings(screen.table, first.out_dir, spec.screen_top, setup.objective.mode)
    if not top:
        echo("screen: no proxy trial completed: nothing to promote to the server")
    echo(f"screen: promoting {len(top)} settings to full server trials")
    # Every promoted setting runs all its rounds: early stopping would leave the ranking
    # comparison with partial scores.
    server = run(spec.model_copy(update={"points": top, "scheduler": "fifo"}), resume=resume,
                 echo=echo)
    corr = rank_correlation(first.out_dir, screen.table, spec.out_dir, server.table)
    write_json(spec.out_dir / SCREEN_JSON, corr)
    rho = corr["spearman"]
    echo(f"screen: proxy vs server ranking over {len(corr['settings'])} settings: "
         + (f"Spearman {rho:.2f}" if rho is not None else "too few settings for a correlation"))
    return server
