"""Does a finished experiment's best/launch.sh serve what it decided? Start the script by hand
as a user would (bash, the user's environment), wait for /health, send one request, read
/server_info, and compare the server's speculative settings with best.json's decision
(``served_config``: the knobs as the decided trial's server resolved them; no speculative
algorithm where the decision serves without it). Writes the evidence to --out and exits 1 on a
mismatch.

    python -m benchmarks.serve_check runs/sglang-decide --out serve_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import requests

from launchers.process import ServerProcess, reap_all

# best.json's flag -> /server_info's field
FIELDS = {"--speculative-num-steps": "speculative_num_steps",
          "--speculative-eagle-topk": "speculative_eagle_topk",
          "--speculative-num-draft-tokens": "speculative_num_draft_tokens"}


def _port(argv: list[str]) -> int:
    for i, word in enumerate(argv):
        if word == "--port" and i + 1 < len(argv):
            return int(argv[i + 1])
        if word.startswith("--port="):
            return int(word.split("=", 1)[1])
    return 30000  # SGLang's own default


def _host(argv: list[str]) -> str:
    for i, word in enumerate(argv):
        if word == "--host" and i + 1 < len(argv):
            return argv[i + 1]
    return "127.0.0.1"  # SGLang's own default


def mismatches(best: dict[str, Any], info: dict[str, Any]) -> list[str]:
    """Where the server's /server_info differs from the decision."""
    out = []
    argv = [str(a) for a in best.get("argv") or []]
    algorithm = next((argv[i + 1] for i, a in enumerate(argv[:-1])
                      if a == "--speculative-algorithm"), None)
    served = info.get("speculative_algorithm")
    if (algorithm or None) != (served or None):
        out.append(f"speculative_algorithm: launch.sh {algorithm!r}, server {served!r}")
    if algorithm:
        for flag, field in FIELDS.items():
            want = (best.get("served_config") or {}).get(flag)
            if want is not None and info.get(field) is not None and int(want) != int(info[field]):
                out.append(f"{field}: decided {want}, server {info[field]}")
    return out


def check(folder: Path, timeout: float) -> dict[str, Any]:
    best = json.loads((folder / "best.json").read_text())
    script = folder / "best" / "launch.sh"
    argv = re.findall(r"^exec (.*)$", script.read_text(), re.MULTILINE)
    words = shlex.split(argv[-1]) if argv else []
    url = f"http://{_host(words)}:{_port(words)}"
    marker = f"{folder.name}/serve-check"
    log = folder / "serve-check.log"
    process = ServerProcess.spawn(["bash", str(script)], dict(os.environ), log, marker)
    began = time.monotonic()
    result: dict[str, Any] = {"launch": str(script), "url": url, "decision": best.get("decision"),
                              "label": best.get("label"), "served_config": best.get("served_config")}
    try:
        while time.monotonic() - began < timeout:
            if process.poll() is not None:
                raise RuntimeError(f"launch.sh exited {process.poll()}: "
                                   f"{process.log_text()[-3000:]}")
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(1)
        else:
            raise RuntimeError(f"no /health in {timeout:.0f} s: {process.log_text()[-3000:]}")
        result["ready_s"] = round(time.monotonic() - began, 1)
        answer = requests.post(f"{url}/generate", json={
            "text": "The capital of France is", "sampling_params": {"max_new_tokens": 16,
                                                                    "temperature": 0}},
            timeout=60)
        answer.raise_for_status()
        result["generated"] = answer.json().get("meta_info", {}).get("completion_tokens")
        info = requests.get(f"{url}/server_info", timeout=10).json()
        result["server_info"] = {k: info.get(k) for k in (
            "speculative_algorithm", *FIELDS.values(), "tp_size", "host", "port", "load_format",
            "attention_backend", "cuda_graph_bs", "cuda_graph_max_bs", "skip_server_warmup")}
        result["mismatches"] = mismatches(best, info)
    finally:
        reap_all(marker, grace=5.0, exact=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a finished experiment folder")
    p.add_argument("--out", type=Path, help="write the evidence here (JSON)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for /health")
    args = p.parse_args(argv)
    result = check(args.folder.resolve(), args.timeout)
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    ok = not result["mismatches"] and (result.get("generated") or 0) > 0
    print(f"launch.sh served {result.get('generated')} tokens; /server_info "
          + ("matches the decision" if ok else f"differs: {result['mismatches']}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
