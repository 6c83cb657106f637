"""SIGINT/SIGTERM to the driver: everything down in a few seconds, then exit.

Ray Tune's own Ctrl-C path checkpoints, waits for trials to wind down (10 s and more) and
then shuts Ray down; a second signal in the middle left helpers and defunct Ray processes.
Here the driver stops itself instead: the first signal kills every process of the experiment
by its marker (servers, helpers, and the private Ray this run started, whose processes carry
the experiment's marker too), SIGTERM then SIGKILL after a short grace; results.csv is
rewritten from the journal (already on disk line by line); the resume command is printed;
the driver exits at once (128 + the signal). Every later signal is ignored: nothing is left
half-stopped. Ray Tune's own SIGINT handler is turned off (TUNE_DISABLE_SIGINT_HANDLER) so
that Ctrl-C reaches this one during ``fit()`` too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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


def stop_now(prefix: str, out_dir: Path, signum: int, save: Callable[[], object],
             echo: Callable[[str], None], grace: float = GRACE_S) -> int:
    """Kill the experiment's processes, save the table, say how to resume; the exit code."""
    for sig in SIGNALS:  # a second signal changes nothing: the stop below runs to its end
        signal.signal(sig, signal.SIG_IGN)
    began = time.monotonic()
    name = signal.Signals(signum).name
    echo(f"{name}: stopping the servers and Ray of {out_dir.name}")
    # The table first: once the private Ray dies, Ray's core worker in this process may end
    # it before the handler does (exit 1 under load); then again with what the stop added.
    with contextlib.suppress(Exception):  # the journal itself is on disk already
        save()
    killed = process.reap_all(prefix, grace=grace)
    with contextlib.suppress(Exception):
        save()
    echo(f"stopped on {name} in {time.monotonic() - began:.1f} s ({len(killed)} processes "
         f"ended); the journal is saved in {out_dir}")
    echo(f"resume with:  {resume_hint(out_dir)}")
    return 128 + signum


@contextlib.contextmanager
def stop_on_signals(prefix: str, out_dir: Path, save: Callable[[], object],
                    echo: Callable[[str], None]) -> Iterator[Callable[[], None]]:
    """While the block runs (in the main thread), SIGINT and SIGTERM stop the whole run
    (``stop_now``) and end the process. Yields ``arm``: to be called again once Ray is up
    (``ray.init`` puts a SIGTERM handler of its own in place, one that just dies)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: object) -> None:
        code = 128 + signum
        try:
            code = stop_now(prefix, out_dir, signum, save, echo)
        except BaseException as err:  # a stop that failed half-way still ends the driver here
            with contextlib.suppress(Exception):
                echo(f"the stop met {type(err).__name__}: {err}; exiting")
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)  # no unwinding through Ray: its exit hooks would wait on the dead Ray

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
