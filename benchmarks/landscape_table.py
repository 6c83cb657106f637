"""Measured landscapes: a table of configuration -> measured metric, and the command that builds
one from a finished ``servetune run`` folder.

The table is a CSV file. Lines starting with ``#`` before the header say what it is, one
``# key: value`` each: ``metric`` (the column holding the measurement; required), ``mode``
(max | min, default max), ``landscape`` (its name; default the file's stem), ``stages``
(``name=KNOB,KNOB; name=KNOB``: staged search's stages; default one stage per knob in column
order), and free text such as ``source``, ``machine`` and ``command``. Then one row per
configuration: a column per knob (the catalogue's names; ``default`` = unset), the metric
column, and ``launches`` (how many measurements the value is the mean of). A knob that holds
one value in every row is pinned. A point that is not in the table is not in the landscape:
its space calls it invalid, so no searcher launches it. The baseline (every searched knob
unset) must be in the table, as every servetune run measures it first.

    python -m benchmarks.landscape_table RUN_DIR --out TABLE.csv [--name NAME]
        [--metric M] [--mode max|min] [--stages SPEC] [--machine TEXT] [--command TEXT]

takes the run's ``results.csv``: rows with status ``ok`` (every round ran), the search and
confirm phases (not the speculative reference launch); repeated configurations become one
row, their metric averaged. Metric and mode default to the run's objective (servetune.json).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.landscapes import Landscape, builtin_landscape
from search_spaces.knobs import CATALOGUE, Value
from search_spaces.space import SearchSpace, from_mapping
from tuner.search.keys import config_key

LAUNCHES = "launches"
UNSET = "default"


@dataclass(frozen=True)
class MeasuredSpace(SearchSpace):
    """A search space whose points are the measured ones: any other point is invalid."""

    measured: frozenset[str] = frozenset()

    def validate(self, config: Mapping[str, Value]) -> list[str]:
        reasons = super().validate(config)
        if not reasons and config_key(self.complete(config)) not in self.measured:
            reasons.append("not measured: outside this landscape's table")
        return reasons


def parse_value(text: str) -> Value:
    """A cell as the knob value it names: ``default`` -> unset, booleans, integers, text."""
    text = text.strip()
    if text.lower() == UNSET:
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text


def show_value(value: Value) -> str:
    return UNSET if value is None else str(value)


def parse_stages(spec: str) -> list[dict[str, Any]]:
    """``allreduce=NCCL_ALGO,NCCL_PROTO; channels=NCCL_MAX_NCHANNELS`` -> stage mappings."""
    stages = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, names = part.partition("=")
        if not sep or not names.strip():
            raise ValueError(f"stage {part!r}: expected name=KNOB,KNOB")
        stages.append({"name": name.strip(), "knobs": [k.strip() for k in names.split(",")]})
    return stages


def read_table(path: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The ``# key: value`` header and the rows of a landscape table."""
    meta: dict[str, str] = {}
    lines = path.read_text().splitlines()
    body = 0
    while body < len(lines) and lines[body].startswith("#"):
        key, sep, value = lines[body][1:].partition(":")
        if sep:
            meta[key.strip()] = value.strip()
        body += 1
    return meta, list(csv.DictReader(lines[body:]))


def load_table(path_text: str) -> Landscape:
    path = Path(path_text)
    meta, rows = read_table(path)
    where = str(path)
    metric = meta.get("metric")
    if not metric:
        raise ValueError(f"{where}: no '# metric: NAME' line")
    if not rows or metric not in rows[0]:
        raise ValueError(f"{where}: no rows with a {metric!r} column")
    names = [c for c in rows[0] if c in CATALOGUE]
    points: dict[str, float] = {}
    configs = []
    for number, row in enumerate(rows, start=2):
        config = {n: parse_value(row[n]) for n in names}
        key = config_key(config)
        if key in points:
            raise ValueError(f"{where}: row {number}: configuration measured twice")
        points[key] = float(row[metric])
        configs.append(config)
    domains: dict[str, list[Value]] = {}
    pins: dict[str, Value] = {}
    for name in names:
        values = list(dict.fromkeys(c[name] for c in configs))
        if len(values) > 1:
            domains[name] = [v for v in values if v is not None]
        elif values[0] is not None:
            pins[name] = values[0]
    stages = parse_stages(meta["stages"]) if meta.get("stages") else [
        {"name": n, "knobs": [n]} for n in domains]
    # a stage keeps the knobs the table varies (the run's space may have had more)
    stages = [{**s, "knobs": kept} for s in stages if (kept := [k for k in s["knobs"]
                                                                 if k in domains])]
    space = from_mapping({"name": meta.get("landscape", path.stem), "knobs": domains,
                          "pins": pins, "stages": stages}, where)
    # a knob unset in every row is absent from the space: the keys drop it too
    measured = {config_key(space.complete({n: v for n, v in c.items() if n in space.domains}))
                : points[config_key(c)] for c in configs}
    if config_key(space.baseline()) not in measured:
        raise ValueError(f"{where}: the baseline (every knob unset) is not in the table")
    space = MeasuredSpace(space.name, space.domains, space.pins, space.stages,
                          space.description, space.source, measured=frozenset(measured))

    def evaluate(config: Mapping[str, Value]) -> float | None:
        return measured[config_key(space.complete(config))]

    about = "; ".join(f"{k} {meta[k]}" for k in ("source", "machine", "command") if k in meta)
    return Landscape(space.name, space, evaluate, f"measured: {about}" if about else "measured",
                     metric=metric, mode=meta.get("mode", "max"))


# ---------------------------------------------------------------- run folder -> table


def table_from_run(rows: Sequence[Mapping[str, str]], metric: str
                   ) -> tuple[list[str], list[tuple[list[str], float, int]]]:
    """The knob columns and, per configuration (first-launch order), its cells, mean metric
    and launches, from results.csv rows."""
    if not rows:
        raise ValueError("results.csv has no rows")
    if metric not in rows[0]:
        raise ValueError(f"results.csv has no {metric!r} column")
    names = [c for c in rows[0] if c in CATALOGUE]
    sums: dict[tuple[str, ...], list[float]] = {}
    for row in rows:
        if row.get("status") != "ok" or row.get("variant") or row.get("phase") not in (
                "search", "confirm", "", None):
            continue
        try:
            value = float(row[metric])
        except (TypeError, ValueError):
            continue
        if value != value:
            continue
        cells = tuple(show_value(parse_value(row[n])) for n in names)
        sums.setdefault(cells, []).append(value)
    if not sums:
        raise ValueError(f"no trial with status ok and a {metric!r} value")
    return names, [(list(c), sum(v) / len(v), len(v)) for c, v in sums.items()]


def write_table(path: Path, meta: Mapping[str, str], names: Sequence[str], metric: str,
                rows: Sequence[tuple[Sequence[str], float, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write("# servetune landscape table: one row per measured configuration\n")
        for key, text in meta.items():
            f.write(f"# {key}: {' '.join(text.split())}\n")
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*names, metric, LAUNCHES])
        for cells, value, launches in rows:
            writer.writerow([*cells, f"{value:.8g}", launches])


def _run_objective(run_dir: Path) -> tuple[str | None, str | None, str | None]:
    """The run's metric, mode and space stages (as a --stages spec), where servetune.json
    and the space can be read."""
    from tuner.spec import SPEC_FILE, ExperimentSpec

    if not (run_dir / SPEC_FILE).exists():
        return None, None, None
    spec = ExperimentSpec.load(run_dir)
    workload = type(spec.workload.build())
    stages = None
    try:
        from search_spaces.space import load

        space = load(spec.space)
        stages = "; ".join(f"{s.name}={','.join(s.knobs)}" for s in space.stages) or None
    except (OSError, ValueError):
        pass
    return spec.metric or workload.default_metric, spec.mode or workload.default_mode, stages


def load_landscape(name: str) -> Landscape:
    """A landscape by name: one of benchmarks.landscapes.NAMES, or ``table:PATH`` for a
    measured table."""
    if name.startswith("table:"):
        return load_table(name.removeprefix("table:"))
    return builtin_landscape(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished servetune run folder")
    parser.add_argument("--out", type=Path, required=True, help="the table to write (CSV)")
    parser.add_argument("--name", help="the landscape's name (default: the table's stem)")
    parser.add_argument("--metric", help="default: the run's objective")
    parser.add_argument("--mode", choices=["max", "min"], help="default: the run's objective")
    parser.add_argument("--stages", help="name=KNOB,KNOB; name=KNOB (default: the run's space)")
    parser.add_argument("--machine", help="where it was measured, in words")
    parser.add_argument("--command", help="the servetune command that made the run")
    args = parser.parse_args(argv)
    metric, mode, stages = _run_objective(args.run_dir)
    metric, mode, stages = args.metric or metric, args.mode or mode or "max", args.stages or stages
    if metric is None:
        parser.error(f"{args.run_dir} has no servetune.json: give --metric")
    with (args.run_dir / "results.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    names, table = table_from_run(rows, metric)
    ok = sum(n for *_, n in table)
    meta = {"landscape": args.name or args.out.stem, "metric": metric, "mode": mode,
            **({"stages": stages} if stages else {}),
            "source": f"{args.run_dir.name}/results.csv, {ok} ok trials of {len(rows)}",
            **({"machine": args.machine} if args.machine else {}),
            **({"command": args.command} if args.command else {})}
    write_table(args.out, meta, names, metric, table)
    landscape = load_table(str(args.out))
    print(f"{args.out}: {len(table)} configurations, {landscape.space.size} points in the "
          f"space; optimum {landscape.optimum:.6g} {metric} ({mode}), {landscape.within} "
          f"within 2%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

