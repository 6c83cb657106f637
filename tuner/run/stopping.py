"""SIGINT/SIGTERM to the driver: everything down in a few seconds, then exit.

Ray Tune's own Ctrl-C path checkpoints, waits for trials to wind down (10 s and more) and
then shuts Ray down; a second signal in the middle left helpers and defunct Ray processes.
Here the driver stops itself instead: the first signal saves results.csv from the journal
(already on disk line by line) while Ray is up, then the driver's process becomes a fresh
Python (exec, same pid, same output) that kills every process of the experiment by its
marker (servers, helpers, and the private Ray this run started, whose processes carry the
experiment's marker too), SIGTERM then SIGKILL after a short grace, prints the resume
command and exits (128 + the signal); nothing of Ray is left in the process to end it
half-way. Every later signal is ignored: nothing is left half-stopped. Ray Tune's own
SIGINT handler is turned off (TUNE_DISABLE_SIGINT_HANDLER) so that Ctrl-C reaches this one
during ``fit()`` too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NoReturn

from launchers import process

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 1.0  # SIGTERM -> SIGKILL for what is still running when the driver is told to stop
TUNE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"


@contextlib.contextmanager
def deaf_to_ctrl_c() -> Iterator[None]:
    """Processes started in this block never see the terminal's Ctrl-C: SIGINT is blocked in
    this thread meanwhile, and a child keeps its parent's signal mask (through exec too).
    The private Ray's processes (and the workers and servers they start later) therefore
    stay up until the driver's own stop ends them in order; a Ctrl-C to the whole foreground
    job used to kill the raylet at once, and the Ray core worker in this process then ended
    the driver with exit 1 before its handler could stop and exit 130. A Ctrl-C that comes
    while blocked is delivered to this process when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def resume_hint(out_dir: Path) -> str:
    return f"servetune run --resume {out_dir}"


Statuses = Mapping[str, str]  # trial id -> how the journal says it ended


def begin_stop(out_dir: Path, signum: int, save: Callable[[], Statuses | None],
               echo: Callable[[str], None]) -> Statuses:
    """The driver's half of a stop, while its Ray is still up: later signals are ignored (a
    second one changes nothing), the table is saved from the journal."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    echo(f"{signal.Signals(signum).name}: stopping the servers and Ray of {out_dir.name}")
    try:
        return save() or {}
    except Exception:  # the journal itself is on disk already
        return {}


def finish_stop(prefix: str, out_dir: Path, signum: int, began: float, statuses: Statuses,
                echo: Callable[[str], None], grace: float = GRACE_S) -> int:
    """Kill the experiment's processes (the private Ray's too), let the trials' records say
    how the journal has them end, say how to resume; the exit code (128 + the signal)."""
    killed = process.reap_all(prefix, grace=grace)
    if statuses:  # a trial killed half-way may have rewritten its record meanwhile
        from tuner.record.trial_file import reconcile  # pydantic: not before the reap
        for trial_id, status in statuses.items():
            with contextlib.suppress(Exception):
                reconcile(out_dir / trial_id, status)
    echo(f"stopped on {signal.Signals(signum).name} in {time.monotonic() - began:.1f} s "
         f"({len(killed)} processes ended); the journal is saved in {out_dir}")
    echo(f"resume with:  {resume_hint(out_dir)}")
    return 128 + signum


def finish_in_fresh_image(prefix: str, out_dir: Path, signum: int, began: float,
                          statuses: Statuses) -> NoReturn:
    """Replace this process (same pid, same output, ignored signals stay ignored) by
    ``python -m tuner.run.stopping`` to finish the stop. Ray's core worker lives in the
    driver: once the private raylet ends, it ends the driver with exit 1 (seen in CI, 0.3 s
    after SIGTERM), before the resume line and exit code; a fresh image holds none of Ray."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    argv = [sys.executable, "-m", __name__, prefix, str(out_dir), str(signum), repr(began),
            json.dumps(dict(statuses))]
    code = 128 + signum
    try:
        os.execv(sys.executable, argv)
    except OSError:  # no interpreter to exec: finish here and hope Ray lets us
        code = finish_stop(prefix, out_dir, signum, began, statuses, print_flushed)
    finally:
        os._exit(code)


def print_flushed(line: str) -> None:
    """tuner.setup.stdout_print, without importing tuner.setup into the stop's fresh image."""
    print(line, flush=True)


@contextlib.contextmanager
def stop_on_signals(prefix: str, out_dir: Path, save: Callable[[], Statuses | None],
                    echo: Callable[[str], None]) -> Iterator[Callable[[], None]]:
    """While the block runs (in the main thread), SIGINT and SIGTERM stop the whole run
    (``begin_stop`` here, ``finish_stop`` in a fresh image) and end the process. Yields
    ``arm``: to be called again once Ray is up (``ray.init`` puts a SIGTERM handler of its own
    in place, one that just dies)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: object) -> None:
        began = time.monotonic()
        statuses: Statuses = {}
        try:
            statuses = begin_stop(out_dir, signum, save, echo)
        finally:  # a stop that failed half-way is still finished
            finish_in_fresh_image(prefix, out_dir, signum, began, statuses)

    def arm() -> None:
        for sig in SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # not while stopping
                signal.signal(sig, handler)

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    arm()
    with process.environ({TUNE_SIGINT_ENV: "1"}):
        try:
            yield arm
        finally:
            for sig, before in previous.items():
                signal.signal(sig, before)


def main(argv: list[str]) -> int:
    """The stop's second half, in the driver's pid: PREFIX OUT_DIR SIGNUM BEGAN STATUSES."""
    prefix, out_dir, signum, began, statuses = argv
    try:
        return finish_stop(prefix, Path(out_dir), int(signum), float(began),
                           json.loads(statuses), print_flushed)
    except Exception as err:  # one clear line, still the signal's exit code
        print_flushed(f"the stop met {type(err).__name__}: {err}; resume with:  "
                      f"{resume_hint(Path(out_dir))}")
        return 128 + int(signum)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
