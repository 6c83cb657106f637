"""``python -m launchers.proxy.comm.native_probe [--cuda]``: can native mode run here? One JSON
line: ok, reason, SGLang's version, sgl_kernel's version, which communicator modules it has.

Run by ``native.run_probe`` in a subprocess with the GPUs hidden (no CUDA context): it builds
SGLang's tensor-parallel group (``init_model_parallel_group``, group name "tp") over one gloo
rank, which runs every import the group's constructor makes (in 0.5.23 that reaches
``sglang.srt.layers.dp_attention`` and through it packages a ``--no-deps`` install lacks), and
imports SGLang's kernels. Nothing is hard-coded about which release: what fails, fails here.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import sys
from typing import Any

COMMUNICATORS = "sglang.srt.distributed.device_communicators"
# Communicator modules whose presence the plan and the results report (absent in some
# releases: 0.5.16 has no pcie_ipc_ar).
KNOWN = ("custom_all_reduce", "custom_all_reduce_v2", "pcie_ipc_ar", "pymscclpp",
         "torch_symm_mem", "pynccl", "quick_all_reduce")


def _why(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".strip().rstrip(":")


def capabilities() -> dict[str, bool]:
    found = {}
    for name in KNOWN:
        try:
            found[name] = importlib.util.find_spec(f"{COMMUNICATORS}.{name}") is not None
        except (ImportError, ValueError):
            found[name] = False
    return found


def build_one_rank_group() -> None:
    """SGLang's world and tensor-parallel groups over one gloo rank (a HashStore)."""
    import torch.distributed as dist

    from launchers.proxy.comm import native_group

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    native_group.build_group(world=1, rank=0, local_rank=0, cuda=False, flags=())


def probe(cuda: bool) -> dict[str, Any]:
    from launchers.proxy.comm.native import KERNELS, _module_version, _version

    out: dict[str, Any] = {"ok": False, "version": _version("sglang"),
                           "kernels": _module_version(KERNELS), "capabilities": {}}
    sink = io.StringIO()  # SGLang's import-time warnings stay out of the JSON line
    try:
        with contextlib.redirect_stdout(sink):
            importlib.import_module("sglang.srt.distributed.parallel_state")
            out["capabilities"] = capabilities()
            build_one_rank_group()
    except BaseException as err:  # any failure (SystemExit too) is the answer
        out["reason"] = f"SGLang's distributed layer does not build here: {_why(err)}"
        return out
    try:
        with contextlib.redirect_stdout(sink):
            importlib.import_module(KERNELS)
    except BaseException as err:  # the same
        out["reason"] = f"SGLang's kernels ({KERNELS}) do not import: {_why(err)}"
        return out
    out.update(ok=True, reason=f"SGLang {out['version']} and {KERNELS} {out['kernels']}"
               + (" (CUDA)" if cuda else ""))
    return out


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m launchers.proxy.comm.native_probe")
    p.add_argument("--cuda", action="store_true", help="the trial runs on GPUs")
    args = p.parse_args()
    print(json.dumps(probe(args.cuda)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
