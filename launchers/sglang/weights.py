"""Which of the sglang workload's metrics random weights leave unchanged.

With ``--load-format dummy`` SGLang fills the target and the draft model with random values and
reads no checkpoint. The passes keep their shapes, so a verify pass, a draft step or a whole
cycle does the same work and issues the same collectives; what changes is what the weights
decide: which drafted tokens are accepted (random drafts are not), and, in a mixture of
experts, where the router sends each token. Every request generates exactly its output length
(bench.py sends ``ignore_eos``), so without speculative decoding throughput and latencies time
fixed work too.
"""

from __future__ import annotations

import re

from launchers.sglang.bench import ROUND_KEYS

# Per pass or cycle, device-timed or from SGLang's step times (metrics.py).
FIXED_WORK_TIMINGS = ("verify_ms", "draft_ms", "cycle_ms")
# What a round has only with speculative decoding on.
SPECULATIVE_ONLY = ("accept_length", "verify_accept_length", "server_accept_length",
                    *FIXED_WORK_TIMINGS)
_LEVEL = re.compile(r"_c\d+$")  # a concurrency level's copy of a metric: verify_ms_c4


def weight_free(metric: str, speculative: bool) -> bool:
    """Whether ``metric`` is the same on random weights as on the checkpoint's."""
    name = _LEVEL.sub("", metric)
    if name in FIXED_WORK_TIMINGS:
        return True
    if name in SPECULATIVE_ONLY:
        return False  # acceptance is what the weights decide
    return not speculative and name in ROUND_KEYS
