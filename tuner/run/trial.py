"""One trial: config -> validate -> launch (``tuner.run.lifecycle``) -> rounds -> stop.

``run_trial`` knows nothing of Ray (``report`` is a callable), so it is usable and testable on
its own; ``tuner.run.trainable`` adapts it to Ray Tune.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from launchers import process
from launchers.base import Metrics, TrialContext, TrialRecord, Workload
from launchers.failures import Failure, FailureKind, TrialFailed
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.record.files import FAILURE_JSON
from tuner.record.trial_file import write_effective, write_failure
from tuner.run.lifecycle import Launch, Limits

log = logging.getLogger(__name__)

Report = Callable[[dict[str, Any]], None]
FAILURE_FILE = FAILURE_JSON  # the name as the modules that import it from here knew it


def _numeric_only(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Ray needs JSON-able results; keep numbers, strings and booleans, drop None."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}


def resolve_port(wanted: int | None) -> int | None:
    if wanted is None:
        return None
    return process.free_port() if wanted == 0 else wanted


def run_trial(config: Mapping[str, Value], *, space: SearchSpace, workload: Workload,
              ctx: TrialContext, rounds: int, report: Report, limits: Limits | None = None,
              experiment_prefix: str = "", stopping: threading.Event | None = None,
              notes: Sequence[str] = ()) -> TrialRecord:
    """Run one configuration; raise TrialFailed (after writing failure.json) when it fails.

    The last round is reported once the server is down, so that a stop from the scheduler
    (which comes with that report) finds nothing left to clean up. ``stopping`` is set when
    the trial is being stopped from outside: a server that dies then is not a failure.
    ``notes``: warnings learned before the call, kept with the trial."""
    record = TrialRecord(ctx.trial_id, dict(config))
    folder = ctx.trial_dir
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    record.timings["wall_start"] = time.time()
    # Leftovers of earlier trials on this node (a reused actor, a crashed driver) go first.
    reaped = process.reap(experiment_prefix or f"{ctx.experiment}/", keep=ctx.marker)
    if reaped:
        record.warnings.append(f"reaped {len(reaped)} leftover processes before the trial")
    record.warnings += [w for w in notes if w not in record.warnings]
    launch = Launch(workload, config, ctx, limits or Limits())
    try:
        reasons = space.validate(config)
        if reasons:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, "; ".join(reasons)))
        record.warnings += space.warnings(config)
        with launch as running:
            record.plan = launch.plan.to_json() if launch.plan else None
            startup = _numeric_only(running.startup())  # where the time to ready went
            record.timings.update(startup)
            t_bench = time.monotonic()
            last: dict[str, Any] | None = None
            for index in range(rounds):
                metrics: Metrics = running.measure(index)
                if index == 0:
                    record.effective = running.effective()
                    write_effective(folder, record.effective)
                    record.warnings += record.effective.get("warnings", [])
                record.rounds.append(metrics)
                record.timings.update(launch.timings, bench_s=time.monotonic() - t_bench)
                record.write(folder)
                last = {**_numeric_only(metrics), **_effective_columns(record.effective),
                        **startup, "round": index + 1, "ready_s": launch.timings["ready_s"]}
                if index + 1 < rounds:
                    report(last)
            t_stop = time.monotonic()
        record.timings["stop_s"] = time.monotonic() - t_stop
        record.status = "ok"
        _absorb(record, launch)
        record.write(folder)
        if last is not None:
            report(last)
        return record
    except TrialFailed as err:
        if stopping is not None and stopping.is_set():
            record.status = "stopped"  # stopped from outside, its server with it
            raise
        record.status = "failed"
        record.failure = err.failure.to_json()
        write_failure(folder, record.failure)
        raise
    except BaseException as err:  # a stop from Ray (SystemExit) or an unexpected error
        if record.status == "ok":  # stopped with the last round's report: nothing was cut
            raise
        record.status = "stopped" if isinstance(err, (SystemExit, KeyboardInterrupt)) else "error"
        if record.status == "error":
            failure = Failure(FailureKind.CRASHED, f"servetune error: {err!r}")
            record.failure = failure.to_json()
            write_failure(folder, record.failure)
        raise
    finally:
        launch.teardown()  # already done on every path through ``with``; here for the rest
        _absorb(record, launch)
        record.timings["total_s"] = time.monotonic() - t0
        record.timings["wall_end"] = time.time()
        record.write(folder)


def _absorb(record: TrialRecord, launch: Launch) -> None:
    """The launch's plan, timings and warnings into the trial's record (once each)."""
    if record.plan is None and launch.plan is not None:
        record.plan = launch.plan.to_json()
    record.timings.update(launch.timings)
    record.warnings += [w for w in launch.warnings if w not in record.warnings]


def _effective_columns(effective: Mapping[str, Any]) -> dict[str, Any]:
    columns = effective.get("columns", {})
    return _numeric_only(columns) if isinstance(columns, dict) else {}
