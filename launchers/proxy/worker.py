"""``python -m launchers.proxy.worker``: the proxy's processes (see ``launchers.proxy.cli``).

The parts: ``cli`` (flags), ``spawner`` (the root that starts and watches the ranks),
``protocol`` (the files shared with the launcher, span names), ``rank`` (one rank's set-up,
rounds and profiles), ``timing`` (graphs, replays, round metrics), ``gate`` (the correctness
check), ``comm`` (the collectives SGLang would run).
"""

from __future__ import annotations

import sys

from launchers.proxy.cli import main

if __name__ == "__main__":
    sys.exit(main())
