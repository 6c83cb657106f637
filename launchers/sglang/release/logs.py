"""SGLang's log-line formats, as its releases print them (0.5.16 and 0.5.23 on an H200,
shared/reference/real-sglang.md): what a line starts with, the lines that say a server is
ready or failed (and how), and where SGLang checks its own arguments (a traceback through there is a
refusal of the arguments, not a crash).

The resident reader's ``launchers/sglang/resolution.py`` spells the argument code as paths of
its own (it runs in SGLang's interpreter and imports nothing of servetune); a test keeps the
two the same.
"""

from __future__ import annotations

import re

# "[2026-01-02 03:04:05.678 DP0 TP0 EP0] message": time, optional ms (SGLANG_LOG_MS=1),
# optional rank tags (``TP<n>`` at TP > 1), the message
LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{1,6}))?((?: [A-Z_]+\d+)*)\] "
                  r"(.*)$")
# The start of any of SGLang's log lines (a traceback's lines do not start so)
LINE_START = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
# srt/entrypoints/http_server.py, once warm-up is done
READY = "The server is fired up and ready to roll!"
# A scheduler's exception, logged whole before SGLang tears its own tree down
SCHEDULER_EXCEPTION = "Scheduler hit an exception:"
# SGLang's watchdog when a scheduler process exits (utils/watchdog.py)
SUBPROCESS_EXIT = re.compile(r"Subprocess \S+ \(pid=\d+\) crashed with exit code (-?\d+)")
# Where SGLang checks its own arguments (0.5.16: server_args.py __post_init__; 0.5.23 also
# arg_groups/*_hook.py through resolve_once)
ARGUMENT_CODE_PATHS = ("/sglang/srt/server_args.py", "/sglang/srt/arg_groups/")
ARGUMENT_CODE = re.compile(r"/sglang/srt/(?:server_args\.py|arg_groups/)")

# The lines that name a failure (patterns, for ``launchers/failures.py``'s table, which holds
# their order and case beside NCCL's, CUDA's and the system's own texts)
GRAPH_CAPTURE_FAILED = r"Capture (?:prefill )?cuda graph failed"
KV_POOL_OOM = r"Not enough memory\. Please try to increase --mem-fraction-static"
WATCHDOG_TIMEOUT = r"watchdog timeout \(self\.watchdog_timeout="
SCHEDULER_DIED = r"scheduler died during initialization"
SIGQUIT = r"Received sigquit from a child process|SIGQUIT received"
PORT_BUSY = r"Port is already in use|is not available in \d+ seconds"
# The launching process's line when a scheduler exits before it is up
SCHEDULER_EXIT = re.compile(r"scheduler died during initialization \(exit code: (-?\d+)\)", re.I)
