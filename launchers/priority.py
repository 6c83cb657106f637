"""The CPU priority a server runs at: its user's, not the one Ray gives its workers.

Ray starts worker processes at niceness +15 (``RAY_worker_niceness``), and a server started
from a trial inherits it: beside any other CPU load its scheduler loop, tokenizer and HTTP
threads get a few percent of a core, which is not how the user's server runs. servetune's
private Ray starts its workers at the driver's niceness; on a cluster given with
``--address`` a trial moves back to its raylet's niceness where the OS allows, and says so
where it does not."""

from __future__ import annotations

import os

import psutil

# A private Ray's workers run at the niceness of the process that started Ray (the value is
# added to the raylet's own).
PRIVATE_RAY_ENV = {"RAY_worker_niceness": "0"}


def match_parent_priority() -> str | None:
    """Lower this process's niceness to its parent's (a Ray worker's parent is its raylet);
    the processes it starts afterwards inherit it. A warning when the OS refuses."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        parent = psutil.Process().parent()
        target = parent.nice() if parent is not None else own
    except psutil.Error:
        return None
    if own <= target:
        return None
    try:
        os.setpriority(os.PRIO_PROCESS, 0, target)
    except PermissionError:
        return (f"the server runs at niceness {own}, below its raylet's {target} (Ray's worker "
                "niceness): start the cluster with RAY_worker_niceness=0 so that the server "
                "runs at the priority it has in production")
    return None
