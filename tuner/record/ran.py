"""What a trial's server ran beside what it asked, per knob: the workload's reading of the
trial's folder (``Workload.ran``: SGLang's own resolution, recorded there), and how the two
compare. SGLang runs ``--speculative-eagle-topk 1`` with steps + 1 draft tokens whatever was
asked: results rows show what ran, the asked value beside it where the two differ."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from search_spaces.knobs import CATALOGUE, Value
from tuner.record.spec_file import load_spec
from tuner.spec import SpecError

Reader = Callable[[Mapping[str, Value], Path], dict[str, Value]]
Ran = Callable[[str, Mapping[str, Value]], dict[str, Value]]  # (trial id, config) -> ran
_READERS: dict[str, Reader] = {}


def reader(out_dir: Path) -> Reader | None:
    """The experiment's workload's reading of what its trials ran (None: not an experiment
    folder yet)."""
    key = str(Path(out_dir).resolve())
    if key not in _READERS:
        try:
            _READERS[key] = load_spec(Path(out_dir)).workload.build().ran
        except (SpecError, OSError, ValueError):
            return None
    return _READERS[key]


def trial_ran(out_dir: Path, trial_id: str | None, config: Mapping[str, Value]
              ) -> dict[str, Value]:
    """What trial ``trial_id``'s server ran of ``config`` ({}: unknown, or it ran as asked)."""
    read = reader(out_dir)
    return read(config, Path(out_dir) / trial_id) if read is not None and trial_id else {}


def ran_in(out_dir: Path) -> Ran:
    """``trial_ran`` for one experiment folder."""
    return lambda trial_id, config: trial_ran(out_dir, trial_id, config)


def asked_column(name: str) -> str:
    """results.csv's column of what a trial asked of a knob, where its server ran other."""
    return f"{name} asked"


def same(name: str, asked: Value, ran: Value) -> bool:
    """Whether ``ran`` is ``asked``: unset, off and the knob's unset value are one state."""
    unset = {None, False, CATALOGUE[name].unset if name in CATALOGUE else None}
    return asked == ran or (asked in unset and ran in unset)


def differs(config: Mapping[str, Value], ran: Mapping[str, Value]) -> dict[str, Value]:
    """The knobs whose server ran other than asked, with the value asked."""
    return {k: v for k, v in config.items() if k in ran and not same(k, v, ran[k])}


def shown(config: Mapping[str, Value], ran: Mapping[str, Value]) -> dict[str, Value]:
    """``config`` with what ran in place of what was asked."""
    return {k: ran.get(k, v) if k in ran else v for k, v in config.items()}
