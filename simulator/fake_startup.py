"""The stand-in's startup: weights by load format, decode CUDA graphs by batch size, with
SGLang 0.5.23's log lines at the moments it writes them (the simulator).

Modelled times (``--fake-load-s``, ``--fake-draft-load-s``, ``--fake-dummy-load-s``,
``--fake-capture-s`` per captured batch size, ``--fake-warmup-s``) are seconds of the modelled
server; the stand-in sleeps them times ``--fake-startup-scale``, so that a test can model
"60 s real weights, 5 s dummy" on a clock a hundred times faster. The log lines report the
time spent in each phase, as SGLang's do (the target's weights load in the rank processes:
their line reports the load, not the processes' own start).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from simulator.cost_model import DEFAULT_GRAPH_MAX_BS

Log = Callable[[str, str], None]


def decode_capture_sizes(args: argparse.Namespace, speculative: bool) -> list[int]:
    """The decode batch sizes SGLang 0.5.23 captures; [] when decode graphs are off.

    An explicit ``--cuda-graph-bs-decode`` list is taken as is, and its largest entry becomes
    the largest captured batch (srt/arg_groups/memory_hook.py); otherwise the list up to
    ``--cuda-graph-max-bs-decode`` follows cuda_graph_hook.py
    ``generate_decode_cuda_graph_batch_sizes`` (finer steps with speculative decoding). The
    stand-in's default largest batch is the cost model's."""
    if (args.disable_cuda_graph or args.disable_decode_cuda_graph
            or args.cuda_graph_backend_decode == "disabled"):
        return []
    if args.cuda_graph_bs_decode:
        return sorted(set(args.cuda_graph_bs_decode))
    max_bs = args.cuda_graph_max_bs_decode or DEFAULT_GRAPH_MAX_BS
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, max_bs + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16),
                 *range(512, max_bs + 1, 32)]
    sizes = [b for b in sizes if b <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def target_load_s(args: argparse.Namespace) -> float:
    """Modelled seconds to load the target's weights with ``--load-format``."""
    return float(args.fake_dummy_load_s if args.load_format == "dummy" else args.fake_load_s)


def random_weights(args: argparse.Namespace) -> bool:
    """Whether the target or the draft runs on random weights: then no drafted token is
    accepted (a random draft and a random target agree by chance only)."""
    return "dummy" in (args.load_format, args.speculative_draft_load_format or args.load_format)


def draft_load_s(args: argparse.Namespace) -> float:
    """The draft's, with ``--speculative-draft-load-format`` (default: ``--load-format``)."""
    fmt = args.speculative_draft_load_format or args.load_format
    return float(args.fake_dummy_load_s if fmt == "dummy" else args.fake_draft_load_s)


class Startup:
    """The phases after the ranks started: each logs SGLang's lines around a timed wait."""

    def __init__(self, args: argparse.Namespace, log: Log, wait: Callable[[float], None],
                 speculative: bool, draft_tokens: int) -> None:
        self.args = args
        self.log = log
        self.wait = wait  # sleeps real seconds, watching the ranks
        self.speculative = speculative
        self.draft_tokens = draft_tokens
        self.sizes = decode_capture_sizes(args, speculative)

    def _timed(self, model_s: float) -> float:
        began = time.monotonic()
        self.wait(model_s * self.args.fake_startup_scale)
        return time.monotonic() - began

    def weights_begin(self) -> None:
        self.log("Load weight begin. avail mem=78.50 GB", "TP0")

    def weights_end(self, elapsed: float, model_type: str = "LlamaForCausalLM") -> None:
        self.log(f"Load weight end. elapsed={elapsed:.2f} s, type={model_type}, "
                 "avail mem=60.00 GB, mem usage=15.00 GB.", "TP0")

    def capture_begin(self, role: str) -> None:
        phase = "verify" if self.speculative and role == "target" else "decode"
        per_req = self.draft_tokens if self.speculative else 1
        self.log(f"Capture {role} {phase} CUDA graph begin. backend=full, "
                 f"num_tokens_per_req={per_req}, avail mem=44.50 GB", "TP0")

    def capture(self, role: str) -> None:
        """Capture ``role``'s decode graphs (none when they are off)."""
        if not self.sizes:
            return
        phase = "verify" if self.speculative and role == "target" else "decode"
        elapsed = self._timed(self.args.fake_capture_s * len(self.sizes))
        shown = f"bs={self.sizes}, " if role == "target" else ""
        self.log(f"Capture {role} {phase} CUDA graph end. {shown}elapsed={elapsed:.2f} s, "
                 "mem usage=0.50 GB, avail mem=44.00 GB.", "TP0")

    def draft(self) -> None:
        """The draft model: its weights, then its graphs (after the target's, as SGLang)."""
        self.weights_begin()
        self.weights_end(self._timed(draft_load_s(self.args)), "LlamaForCausalLMEagle3")
        if self.sizes:
            self.capture_begin("draft")
            self.capture("draft")

    def warmup(self) -> None:
        """SGLang's warm-up request, unless ``--skip-server-warmup``."""
        if not self.args.skip_server_warmup:
            self._timed(self.args.fake_warmup_s)
