"""A server experiment's measured accept length per speculative shape, read from its journal:
what ``--accept-length-from DIR`` gives the proxy (plain data; the proxy's args validate it).

Every launch of a shape (search trials and confirm repeats; not the reference run without
speculative decoding) contributes the mean of its rounds' ``accept_length`` (bench_serving's:
completion tokens / verify cycles of the round's requests); a shape's figure is the mean over
its launches. A shape is its three speculative knobs as launched, None for the server's
default.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from search_spaces.knobs import SPECULATIVE_KNOBS, Value
from tuner.record.events import NO_SPECULATIVE
from tuner.record.experiment import Experiment
from tuner.record.files import JOURNAL
from tuner.stats import finite

ACCEPT = "accept_length"
FIELDS = ("steps", "topk", "draft_tokens")  # SPECULATIVE_KNOBS, in order


def measured_acceptance(folder: Path) -> list[dict[str, Any]]:
    """One entry per measured shape: steps, topk, draft_tokens, accept_length, launches,
    source. Raises ValueError (bad input) when the folder holds no such measurement."""
    if not (folder / JOURNAL).is_file():
        raise ValueError(f"{folder}: not a servetune experiment with results (no {JOURNAL})")
    launches: dict[tuple[Value, ...], list[float]] = defaultdict(list)
    for trial in Experiment.journal(folder).trials.values():
        if trial.variant == NO_SPECULATIVE:  # no drafts; the decided shape again counts
            continue
        values = [v for r in trial.rounds if (v := finite(r.get(ACCEPT))) is not None]
        if values:
            shape = tuple(trial.config.get(k) for k in SPECULATIVE_KNOBS)
            launches[shape].append(statistics.fmean(values))
    if not launches:
        raise ValueError(f"{folder}: no trial measured {ACCEPT} (was speculative decoding on, "
                         "with the sglang workload?)")
    return [{**dict(zip(FIELDS, shape, strict=True)), ACCEPT: statistics.fmean(means),
             "launches": len(means), "source": str(folder)}
            for shape, means in sorted(launches.items(), key=lambda kv: str(kv[0]))]
