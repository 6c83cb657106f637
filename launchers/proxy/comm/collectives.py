"""The collectives a rank runs, one class per path (``dispatch`` decides which).

Every class answers the model's three calls: ``all_reduce(t)`` returns the reduced tensor (in
place or out of place), ``all_gather(out, t)`` fills ``out``, and ``reduce_add_norm(t,
residual)`` is a layer boundary: the all-reduce, the residual add and the next RMSNorm,
returning (new residual, normed). Only the fusion path runs the last as its own call.

Paths and what runs them here:
  nccl / gloo            torch.distributed (NCCL on GPUs, gloo on CPU), in place
  custom_ar_1shot        torch symmetric memory ``one_shot_all_reduce_copy_out``: copy into the
                         symmetric buffer, every rank reads every peer's buffer (SGLang's v2
                         1shot_push/1shot_pull and legacy 1stage read peer memory the same way)
  custom_ar_2shot        copy into the symmetric buffer, ``two_shot_all_reduce_out``
                         (reduce-scatter then all-gather over peer memory)
  torch_symm_mem_2shot   as SGLang's TorchSymmMemCommunicator: copy in, ``two_shot_all_reduce_``
                         in place, copy out
  fusion                 emulated: the one-shot all-reduce above, then the residual add and
                         RMSNorm as separate kernels (FlashInfer fuses the three in one kernel;
                         the emulation pays their launches and memory round trips)
  none                   the compute-only pass: every collective a no-op on the same buffers
The logits all-gather is NCCL's (or gloo's) in every path.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist

from launchers.proxy.comm import dispatch
from launchers.proxy.protocol import COMM_SPAN_PREFIX


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-6).to(x.dtype)


def _comm_span(name: str) -> contextlib.AbstractContextManager[object]:
    """A profiler span around one collective, only while a profiler records (nothing on the
    timed path otherwise). On CPU it marks gloo's time as communication in the trace; CUDA
    graph replays run no Python, so there the kernels' names say it instead."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(COMM_SPAN_PREFIX + name)
    return contextlib.nullcontext()


class Collectives:
    """One rank, no process group: nothing to reduce, the gather is a copy.

    The hooks native mode fills (``native_group.NativeCollectives``) do nothing here:
    ``capture`` (the context graphs are captured in), ``prepare`` (before capture), ``observe``
    (which path served), ``record`` (what the ready line adds)."""

    path = "local"

    def capture(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def prepare(self, *, hidden: int, rows: int) -> None:
        return None

    def observe(self, buf: torch.Tensor, out: torch.Tensor, src: torch.Tensor) -> None:
        return None

    def record(self) -> dict[str, Any]:
        return {}

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        out.copy_(t)

    def reduce_add_norm(self, t: torch.Tensor, residual: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        x = residual + self.all_reduce(t)
        return x, rms_norm(x)


class NoCollectives(Collectives):
    """The compute-only pass: the same buffers, no communication (the gather writes nothing)."""

    path = "none"

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        return None


class DistCollectives(Collectives):
    """The default torch.distributed group: NCCL on GPUs, gloo on CPU."""

    def __init__(self, path: str = dispatch.NCCL) -> None:
        self.path = path
        # all_gather_single (newer torch) is what all_gather_into_tensor became
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        with _comm_span("all_reduce"):
            dist.all_reduce(t)
        return t

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        with _comm_span("all_gather"):
            self._gather(out, t)


def _cuda_backend(symm_mem: Any, device: torch.device) -> str | None:
    """Peer memory through CUDA's own IPC (torch's "CUDA" backend), as SGLang's custom
    allreduce maps its buffers, rather than NVSHMEM where torch would pick it; returns the
    backend in use (None: this torch cannot say)."""
    get, put = getattr(symm_mem, "get_backend", None), getattr(symm_mem, "set_backend", None)
    if get is None:
        return None
    if get(device) != "CUDA" and put is not None:
        with contextlib.suppress(Exception):  # chosen already, or not offered: keep it
            put("CUDA")
    found = get(device)
    return None if found is None else str(found)


class SymmMemCollectives(DistCollectives):
    """All-reduces over torch symmetric memory (peer loads over NVLink), the gather NCCL's.

    One symmetric buffer of ``max_numel`` elements is allocated and rendezvoused at setup
    (every rank, same order, outside capture); each all-reduce writes a fresh output tensor, as
    SGLang's out-of-place custom allreduce does."""

    def __init__(self, path: str, max_numel: int, dtype: torch.dtype, device: torch.device
                 ) -> None:
        super().__init__(path)
        if path not in (dispatch.CUSTOM_1SHOT, dispatch.CUSTOM_2SHOT, dispatch.TORCH_SYMM_2SHOT,
                        dispatch.FUSION):
            raise ValueError(f"not a symmetric-memory path: {path}")
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = dist.group.WORLD.group_name  # type: ignore[union-attr]
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None and torch.__version__ < "2.11":
            enable(self.group_name)  # older torch needs it before a rendezvous
        self.backend = _cuda_backend(symm_mem, device)
        self.buffer = symm_mem.empty(max_numel, dtype=dtype, device=device)
        self.handle: Any = symm_mem.rendezvous(self.buffer, self.group_name)
        self.multicast = int(getattr(self.handle, "multicast_ptr", 0) or 0) != 0
        self._ops: Any = torch.ops.symm_mem
        # the copy into the symmetric buffer inside the kernel where this torch has it
        self._copy_in = hasattr(self._ops, "one_shot_all_reduce_copy_out")

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        n = t.numel()
        flat, staged = t.reshape(-1), self.buffer[:n]
        out = torch.empty_like(t)
        with _comm_span("all_reduce"):
            if self.path in (dispatch.CUSTOM_1SHOT, dispatch.FUSION) and self._copy_in:
                self._ops.one_shot_all_reduce_copy_out(staged, flat, "sum", self.group_name,
                                                       out.view(-1))
            elif self.path in (dispatch.CUSTOM_1SHOT, dispatch.FUSION):
                staged.copy_(flat)
                self._ops.one_shot_all_reduce_out(staged, "sum", self.group_name, out.view(-1))
            elif self.path == dispatch.CUSTOM_2SHOT:
                staged.copy_(flat)
                self._ops.two_shot_all_reduce_out(staged, "sum", self.group_name, out.view(-1))
            else:  # SGLang's TorchSymmMemCommunicator.all_reduce at 2 ranks
                staged.copy_(flat)
                self._ops.two_shot_all_reduce_(staged, "sum", self.group_name)
                out.view(-1).copy_(staged)
        return out


def build(path: str, *, world: int, cuda: bool, max_numel: int, dtype: torch.dtype,
          device: torch.device) -> Collectives:
    """The collectives of ``path`` for this rank. On CPU every path runs gloo."""
    if world <= 1 and not cuda:
        return Collectives()
    if not cuda:
        return DistCollectives(dispatch.GLOO)
    if path not in dispatch.RUNNABLE:
        raise ValueError(f"the proxy does not run the {path} path"
                         + (f": {dispatch.NOT_MODELLED[path]}" if path in dispatch.NOT_MODELLED
                            else ""))
    if path == dispatch.NCCL or world <= 1:
        return DistCollectives(dispatch.NCCL)
    return SymmMemCollectives(path, max_numel, dtype, device)
