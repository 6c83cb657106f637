"""The sglang workload's command-line options (``SGLangArgs.cli_options``), in the order
``servetune run --help`` lists them; tuner/cli adds them to its workload group."""

from __future__ import annotations

from launchers.options import (
    COMMAND,
    INT_LIST,
    MODEL,
    OFF,
    PATH_OR_NAME,
    PORT,
    READY_TIMEOUT,
    WORDS,
    CliOption,
)
from launchers.sglang.datasets import BUILTIN, RANDOM


def _dataset_names() -> tuple[str, ...]:
    return (BUILTIN, RANDOM)


CLI_OPTIONS: tuple[CliOption, ...] = (
    CliOption("--model", "model", {"help": "sglang: model path (or hub id org/name)"}, MODEL),
    CliOption("--draft-model", "draft_model", {"help": "sglang: speculative draft model path"},
              MODEL),
    CliOption("--tp", "tp", {"type": int,
                             "help": "sglang: tensor parallel size (default: all GPUs)"}),
    CliOption("--speculative-algorithm", "speculative_algorithm",
              {"help": "sglang: e.g. EAGLE3"}),
    CliOption("--server-arg", "server_args", {
        "action": "append", "default": [], "metavar": "ARGS",
        "help": "extra server arguments (repeatable; shell-split)"}, WORDS),
    CliOption("--server-cmd", "server_cmd", {
        "help": "replaces 'sglang serve' (a venv, a container, a stand-in)"}, COMMAND),
    PORT,
    READY_TIMEOUT,
    CliOption("--dataset", "dataset", {
        "help": "sglang: prompts: 'builtin' (real text shipped with Python, the default), "
        "'random' (token ids), or a ShareGPT JSON / custom JSONL file as SGLang's bench "
        "reads them"}, PATH_OR_NAME, _dataset_names),
    CliOption("--input-len", "input_len", {
        "type": int, "help": "sglang: prompt length in tokens (a cap for text prompts)"}),
    CliOption("--output-len", "output_len", {
        "type": int, "help": "sglang: output tokens per request (a cap for a dataset's own "
        "lengths)"}),
    CliOption("--concurrency", "concurrency", {
        "help": "sglang: concurrency levels, comma list (e.g. 1,4,16): every round measures "
        "each level, each level gets its own winner"}, INT_LIST),
    CliOption("--decide-at", "objective_concurrency", {
        "type": int, "metavar": "LEVEL", "help": "sglang: the level the search optimises "
        "and best/launch.sh is for (default: the first)"}),
    CliOption("--requests-per-round", "requests_per_round", {"type": int}),
    CliOption("--no-nccl-debug", "nccl_debug", {
        "action": "store_true",
        "help": "sglang: no NCCL_DEBUG=INFO logs (no effective-settings check)"}, OFF),
    CliOption("--no-preflight", "preflight", {
        "action": "store_true",
        "help": "sglang: skip the check against SGLang's own argument parser"}, OFF),
    CliOption("--no-fast-start", "fast_start", {
        "action": "store_true",
        "help": "sglang: trials keep SGLang's own warm-up request and prefill CUDA graphs "
        "even where the measurement does not use them"}, OFF),
)
