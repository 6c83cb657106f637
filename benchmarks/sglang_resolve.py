"""SGLang's own resolution of a few commands in servetune's resident reader
(launchers/sglang/resolution.py), on the machine where SGLang serves: what was resolved,
rejected or skipped, how long it took, and whether the reader holds a GPU context (it must
not: a trial's GPUs must be clean before its server starts).

    python -m benchmarks.sglang_resolve --model M --draft D --out resolve.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from launchers.sglang import preflight

SHOWN = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
         "attention_backend", "sampling_backend", "cuda_graph_max_bs", "cuda_graph_bs",
         "disable_cuda_graph", "device", "mem_fraction_static", "max_running_requests")


def commands(model: str, draft: str) -> dict[str, list[str]]:
    base = ["--model-path", model, "--load-format", "dummy", "--tp-size", "1",
            "--attention-backend", "triton", "--sampling-backend", "pytorch"]
    spec = [*base, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
            "--speculative-draft-load-format", "dummy"]
    return {
        "plain": base,
        "eagle3-auto": spec,
        "eagle3-3-1-4": [*spec, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "4"],
        "eagle3-3-1-8": [*spec, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "8"],
        "eagle3-topk-only": [*spec, "--speculative-eagle-topk", "1"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    named = commands(args.model, args.draft)
    began = time.monotonic()
    results = preflight.shared().resolve_many(list(named.values()))
    seconds = time.monotonic() - began
    try:
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                               "--format=csv,noheader"], capture_output=True, text=True).stdout
    except OSError:
        apps = "(no nvidia-smi)"
    print(f"resolved {len(named)} commands in {seconds:.1f} s (SGLang's import included); "
          f"GPU processes while the reader lives: {apps.strip() or 'none'}")
    out = {}
    for name, result in zip(named, results, strict=True):
        shown = {k: (result.resolved or {}).get(k) for k in SHOWN}
        print(f"{name}: ok={result.ok} {result.error[:200]} skipped={list(result.skipped)} "
              f"placeholders={list(result.placeholders)} {json.dumps(shown)}")
        out[name] = {"argv": named[name], **result.to_json()}
    Path(args.out).write_text(json.dumps({"seconds": seconds, "gpu_apps": apps,
                                          "results": out}, indent=1))
    preflight.shared().close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
