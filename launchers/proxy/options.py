"""The proxy workload's command-line options (``ProxyArgs.cli_options``), in the order
``servetune run --help`` lists them; tuner/cli adds them to its workload group."""

from __future__ import annotations

from launchers.options import ACCEPT_LENGTHS, PATH_OR_NAME, PORT, READY_TIMEOUT, CliOption
from launchers.proxy.shapes import preset_names

CLI_OPTIONS: tuple[CliOption, ...] = (
    PORT,
    READY_TIMEOUT,
    CliOption("--model-config", "model", {"help": "proxy: shape preset or config.json"},
              PATH_OR_NAME, preset_names),
    CliOption("--accept-length-from", "accept_lengths", {
        "metavar": "DIR", "help": "proxy: a server experiment with speculative decoding; its "
        "measured accept length per speculative shape drives est_tok_s (without it the "
        "proxy ranks no speculative shape)"}, ACCEPT_LENGTHS),
    CliOption("--layers", "layers", {"type": int, "help": "proxy: run N layers and scale"}),
    CliOption("--batch", "batch", {"type": int, "help": "proxy: requests in the verify batch"}),
    CliOption("--kv-len", "kv_len", {"type": int, "help": "proxy: KV cache length"}),
    CliOption("--iters", "iters_per_round", {
        "type": int, "help": "proxy: graph replays timed per round (default 50 on GPU, 10 "
        "on CPU)"}),
    CliOption("--interconnect", "interconnect", {
        "choices": ["auto", "nvlink", "pcie"],
        "help": "proxy: 'pcie' runs what a PCIe box has on any GPUs (NCCL_P2P_DISABLE=1, "
        "SGLang's allreduce rules without NVLink)"}),
    CliOption("--proxy-comm", "proxy_comm", {
        "choices": ["auto", "native", "emulated"],
        "help": "proxy: native runs every collective through the installed SGLang's "
        "distributed layer (its dispatch, kernels, thresholds); emulated the proxy's own "
        "paths; auto (default): native where SGLang and its kernels import"}),
)
