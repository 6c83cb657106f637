"""Multi-fidelity search: screen the NCCL part of the space on the proxy (seconds a trial),
then launch only the top k settings as full server trials (minutes a trial), and say how
well the proxy's ranking held up on the server (Spearman rank correlation)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from launchers.registry import screen_args
from search_spaces import knobs
from search_spaces.searches import RANDOM, strategy
from search_spaces.space import load
from tuner.record.experiment import Experiment
from tuner.record.files import SCREEN_JSON
from tuner.record.info import ScreenRecord, write_record
from tuner.record.rows import ranked as best_first
from tuner.record.rows import rows_of, search_rows
from tuner.run.experiment import run
from tuner.run.finish import RunOutcome
from tuner.run.fit import started
from tuner.setup import Print, prepare, stdout_print
from tuner.spec import ExperimentSpec, SpecError

SCREEN_DIR = "screen"


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
        "search": RANDOM if strategy(spec.search).staged or strategy(spec.search).exhaustive
        else spec.search,
        # The server's limits, study and trackers are the server trials' (the proxy reports
        # none of bench_serving's latencies).
        "limits": [], "optuna_storage": None, "callbacks": [],
    })


def env_part(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in knobs.CATALOGUE and screened(knobs.CATALOGUE[k])}


def ranking(table: pd.DataFrame, out_dir: Path, mode: str) -> list[dict[str, Any]]:
    """The screened NCCL settings, best first (completed trials, baseline excluded, each
    setting once)."""
    done = [r for r in rows_of(table) if r.done and not r.baseline]
    launched = Experiment.journal(out_dir).settings() if done else {}
    ranked: list[dict[str, Any]] = []
    for row in best_first(done, "score", mode):
        env = env_part(launched[row.trial_id])
        if env not in ranked:
            ranked.append(env)
    return ranked


def promoted(ranked: list[dict[str, Any]], top: int, spread: int
             ) -> list[tuple[str, dict[str, Any]]]:
    """The ``top`` best settings (the candidates), then ``spread`` more at evenly spaced
    ranks down to the worst (the middle and the bottom of the proxy's ranking), so that the
    proxy-vs-server correlation is measured over the whole ranking, not its top alone."""
    picked = [("top", s) for s in ranked[:top]]
    rest = ranked[top:]
    if spread and rest:
        ranks = sorted({round(j * (len(rest) - 1) / spread) for j in range(1, spread + 1)})
        picked += [("spread", rest[r]) for r in ranks]
    return picked


def spearman_interval(rho: float, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """95% interval of a Spearman correlation over n pairs: Fisher's z with the standard
    error 1.03 / sqrt(n - 3) (Fieller, Hartley and Pearson, 1957); None below 4 pairs."""
    if n < 4 or not -1.0 < rho < 1.0:
        return None if n < 4 else (rho, rho)
    center, half = math.atanh(rho), z * 1.03 / math.sqrt(n - 3)
    return math.tanh(center - half), math.tanh(center + half)


def rank_correlation(screen_dir: Path, screen_table: pd.DataFrame, server_dir: Path,
                     server_table: pd.DataFrame,
                     roles: dict[str, str] | None = None) -> dict[str, Any]:
    """Proxy score vs server score for the settings both measured: Spearman's rho, its n
    and its 95% interval."""
    def keyed(out_dir: Path, table: pd.DataFrame) -> dict[str, float]:
        launched = Experiment.journal(out_dir).settings()
        # search trials only: not the confirm repeats or the reference
        return {_key(env_part(launched[r.trial_id])): float(r.score)
                for r in search_rows(rows_of(table)) if r.done and r.score is not None}

    proxy, server = keyed(screen_dir, screen_table), keyed(server_dir, server_table)
    common = [k for k in server if k in proxy]
    pairs = pd.DataFrame({"proxy": [proxy[k] for k in common],
                          "server": [server[k] for k in common]})
    # Spearman = Pearson on ranks (pandas' own spearman needs scipy).
    rho = float(pairs["proxy"].rank().corr(pairs["server"].rank())) if len(pairs) >= 3 \
        else None
    interval = spearman_interval(rho, len(pairs)) if rho is not None and rho == rho else None
    return {"settings": [json.loads(k) for k in common], "proxy": pairs["proxy"].tolist(),
            "server": pairs["server"].tolist(),
            "roles": [(roles or {}).get(k, "other") for k in common],
            "n": len(pairs), "spearman": rho,
            "interval": list(interval) if interval is not None else None}


def _key(env: dict[str, Any]) -> str:
    return json.dumps(env, sort_keys=True, default=str)


def run_screened(spec: ExperimentSpec, *, resume: bool = False,
                 echo: Print = stdout_print) -> RunOutcome:
    first = screen_spec(spec)
    echo(f"screen: the NCCL part of {spec.space} on the proxy ({first.workload.shape_source()}), "
         f"then the top {spec.screen_top} on the server")
    screen = run(first, resume=resume and started(first.out_dir), echo=echo)
    if screen.broken_environment:  # the proxy's baseline cannot run here: nor can the rest
        return screen
    setup = prepare(first)
    ranked = ranking(screen.table, first.out_dir, setup.objective.mode)
    picked = promoted(ranked, spec.screen_top, spec.screen_spread)
    if not picked:
        echo("screen: no proxy trial completed: nothing to promote to the server")
    spread = sum(1 for role, _ in picked if role == "spread")
    echo(f"screen: promoting {len(picked)} settings to full server trials: the proxy's top "
         f"{len(picked) - spread} and {spread} from the middle and bottom of its ranking "
         f"({len(ranked)} settings)")
    # Every promoted setting runs all its rounds: early stopping would leave the ranking
    # comparison with partial scores.
    server = run(spec.model_copy(update={"points": [s for _, s in picked],
                                         "scheduler": "fifo"}), resume=resume, echo=echo)
    roles = {_key(env_part(prepare(spec).space.baseline())): "baseline",
             **{_key(s): role for role, s in picked}}
    corr = rank_correlation(first.out_dir, screen.table, spec.out_dir, server.table, roles)
    write_record(spec.out_dir / SCREEN_JSON, ScreenRecord.model_validate(corr))
    echo("screen: " + correlation_text(corr))
    return server


def correlation_text(corr: dict[str, Any]) -> str:
    rho, n, interval = corr["spearman"], corr["n"], corr.get("interval")
    if rho is None:
        return f"proxy vs server ranking over {n} settings: too few for a correlation"
    ci = f", 95% interval [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else \
        " (no interval below 4 settings)"
    return f"proxy vs server ranking: Spearman {rho:.2f} over n={n} settings{ci}"
