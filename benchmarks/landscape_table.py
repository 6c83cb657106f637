"""Measured landscapes: a table of configuration -> measured metric, and the command that builds
one from a finished ``servetune run`` folder.

The table is a CSV file. Lines starting with ``#`` before the header say what it is, one
``# key: value`` each: ``metric`` (the column holding the measurement; required), ``mode``
(max | min, default max), ``landscape`` (its name; default the file's stem), ``stages``
(``name=KNOB,KNOB; name=KNOB``: staged search's stages; default one stage per knob in column
order), and free text such as ``source``, ``machine`` and ``command``. Then one row per
configuration: a column per knob (the catalogue's names; ``default`` = unset), the metric
column, ``launches`` (how many measurements the value is the mean of, or how many launches
failed) and ``kind``: empty where the configuration ran, else the failure kind it met (its
metric cell empty). A knob that holds one value in every row is pinned. A point that is not
in the table is not in the landscape: its space calls it invalid, so no searcher launches
it; a point that failed is in it, and fails with its kind whenever a searcher launches it.
The baseline (every searched knob unset) must be in the table and must run, as every
servetune run measures it first.

    python -m benchmarks.landscape_table RUN_DIR --out TABLE.csv [--name NAME]
        [--metric M] [--mode max|min] [--stages SPEC] [--machine TEXT] [--command TEXT]

takes the run's ``results.csv``: the search and confirm phases (not the speculative reference
launch), rows with status ``ok`` (every round ran) and ``failed`` (with their failure kind;
kinds that say nothing about a configuration, a busy port or GPU, are left out). Repeated
configurations become one row: the mean of those that ran, else the kind most of its
failures had. Metric and mode default to the run's objective (servetune.json).
"""

from __future__ import annotations

import argparse
import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.landscapes import FAILURES, LEVERS, MACHINES, Landscape, builtin_landscape
from benchmarks.landscapes_failures import failure_landscape
from benchmarks.landscapes_levers import lever_landscape
from benchmarks.machines import machine_landscape
from search_spaces.knobs import CATALOGUE, Value
from search_spaces.space import SearchSpace, from_mapping
from tuner.search.keys import config_key
from tuner.search.memory import ENVIRONMENTAL

LAUNCHES = "launches"
KIND = "kind"
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
    points: dict[str, float | str] = {}  # the metric, or the failure kind
    configs = []
    for number, row in enumerate(rows, start=2):
        config = {n: parse_value(row[n]) for n in names}
        key = config_key(config)
        if key in points:
            raise ValueError(f"{where}: row {number}: configuration measured twice")
        kind = (row.get(KIND) or "").strip()
        try:
            points[key] = kind or float(row[metric])
        except ValueError:
            raise ValueError(f"{where}: row {number}: {metric} {row[metric]!r} is not a "
                             f"number and no failure kind is given") from None
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
    if not isinstance(measured.get(config_key(space.baseline())), float):
        raise ValueError(f"{where}: the baseline (every knob unset) is not in the table as "
                         "a configuration that ran")
    space = MeasuredSpace(space.name, space.domains, space.pins, space.stages,
                          space.description, space.source, measured=frozenset(measured))

    def evaluate(config: Mapping[str, Value]) -> float | None:
        point = measured[config_key(space.complete(config))]
        return point if isinstance(point, float) else None

    def failure(config: Mapping[str, Value]) -> str:
        return str(measured[config_key(space.complete(config))])

    about = "; ".join(f"{k} {meta[k]}" for k in ("source", "machine", "command") if k in meta)
    return Landscape(space.name, space, evaluate, f"measured: {about}" if about else "measured",
                     metric=metric, mode=meta.get("mode", "max"), failure=failure)


# ---------------------------------------------------------------- run folder -> table


Row = tuple[list[str], float | None, int, str]  # cells, mean metric, launches, failure kind


def table_from_run(rows: Sequence[Mapping[str, str]], metric: str) -> tuple[list[str], list[Row]]:
    """The knob columns and, per configuration (first-launch order), its cells, mean metric
    (None where every launch failed), launches and failure kind, from results.csv rows."""
    if not rows:
        raise ValueError("results.csv has no rows")
    if metric not in rows[0]:
        raise ValueError(f"results.csv has no {metric!r} column")
    names = [c for c in rows[0] if c in CATALOGUE]
    ran: dict[tuple[str, ...], list[float]] = {}
    failed: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if row.get("variant") or row.get("phase") not in ("search", "confirm", "", None):
            continue
        cells = tuple(show_value(parse_value(row[n])) for n in names)
        if row.get("status") == "failed":
            kind = (row.get("failure_kind") or "crashed").strip()
            if kind not in ENVIRONMENTAL:
                failed.setdefault(cells, []).append(kind)
                ran.setdefault(cells, [])
            continue
        if row.get("status") != "ok":
            continue
        try:
            value = float(row[metric])
        except (TypeError, ValueError):
            continue
        if value == value:
            ran.setdefault(cells, []).append(value)
    if not any(ran.values()):
        raise ValueError(f"no trial with status ok and a {metric!r} value")
    out: list[Row] = []
    for cells, values in ran.items():
        if values:
            out.append((list(cells), sum(values) / len(values), len(values), ""))
        else:
            kinds = failed[cells]
            out.append((list(cells), None, len(kinds), max(kinds, key=kinds.count)))
    return names, out


def write_table(path: Path, meta: Mapping[str, str], names: Sequence[str], metric: str,
                rows: Sequence[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write("# servetune landscape table: one row per measured configuration\n")
        for key, text in meta.items():
            f.write(f"# {key}: {' '.join(text.split())}\n")
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([*names, metric, LAUNCHES, KIND])
        for cells, value, launches, kind in rows:
            writer.writerow([*cells, "" if value is None else f"{value:.8g}", launches, kind])


def _run_objective(run_dir: Path) -> tuple[str | None, str | None, str | None]:
    """The run's metric, mode and space stages (as a --stages spec), where servetune.json
    and the space can be read."""
    from tuner.record.spec_file import has_spec, load_spec

    if not has_spec(run_dir):
        return None, None, None
    spec = load_spec(run_dir)
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
    if name in MACHINES:
        return machine_landscape(name)
    if name in LEVERS:
        return lever_landscape(name)
    if name in FAILURES:
        return failure_landscape(name)
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
    ok = sum(n for _, value, n, _ in table if value is not None)
    failed = sum(n for _, value, n, _ in table if value is None)
    meta = {"landscape": args.name or args.out.stem, "metric": metric, "mode": mode,
            **({"stages": stages} if stages else {}),
            "source": f"{args.run_dir.name}/results.csv, {ok} ok trials and {failed} failed "
                      f"of {len(rows)}",
            **({"machine": args.machine} if args.machine else {}),
            **({"command": args.command} if args.command else {})}
    write_table(args.out, meta, names, metric, table)
    landscape = load_table(str(args.out))
    failing = sum(value is None for _, value, _, _ in table)
    print(f"{args.out}: {len(table)} configurations ({failing} that failed), "
          f"{landscape.space.size} points in the space; optimum {landscape.optimum:.6g} "
          f"{metric} ({mode}), {landscape.within} within 2%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

