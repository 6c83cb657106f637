"""Native mode on a rank: the installed SGLang's tensor-parallel group runs the collectives.

``build_group`` joins SGLang's distributed layer to the proxy's process group (already made by
``rank.init_group``: SGLang's ``init_distributed_environment`` then only adds its world group)
and builds the "tp" group with ``init_model_parallel_group``, as SGLang's model runner does, with
the configuration's switches (``--disable-custom-all-reduce``, ``--enable-mscclpp``,
``--enable-torch-symm-mem``) passed as that release's function spells them, and SGLANG_*
variables read by SGLang from the environment. Its constructor creates the communicators it
decides on (custom allreduce v1/v2, PCIe-IPC, MSCCL++, torch symm-mem, pynccl).

``NativeCollectives`` sends every all-reduce to ``GroupCoordinator.all_reduce`` and the logits
all-gather to ``all_gather_into_tensor``, and captures inside ``GroupCoordinator.graph_capture``
(custom allreduce registers the captured buffers when it exits, so graphs replay only after).
Which communicator served is observed, not predicted: during one call of each collective, the
public all-reduce/all-gather methods of every communicator object the group holds are wrapped
and the outermost one called is recorded; none called means torch.distributed on the group.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from launchers.proxy.comm import dispatch
from launchers.proxy.comm.collectives import Collectives
from launchers.proxy.comm.native import NATIVE_NOT_MODELLED

COMMUNICATORS = "sglang.srt.distributed.device_communicators"
SERVING = re.compile(r"^(?!should_)[a-z]\w*(all_reduce|all_gather)\w*$")
# The communicator attribute of a GroupCoordinator -> the path name the results use.
PATHS = {"ca_comm": "custom_ar", "pcie_ipc_comm": "pcie_ipc", "pymscclpp_comm": "mscclpp",
         "torch_symm_mem_comm": "torch_symm_mem", "pynccl_comm": "pynccl",
         "qr_comm": "quick_ar"}
FALLBACK = "torch_distributed"


class NativeUnavailable(RuntimeError):
    """SGLang's distributed layer cannot run here; the message says why."""


def parallel_state() -> Any:
    try:
        import sglang.srt.distributed.parallel_state as ps
    except Exception as err:  # any import failure is the reason
        raise NativeUnavailable(f"native mode: SGLang's distributed layer does not import: "
                                f"{type(err).__name__}: {err}") from err
    return ps


def sglang_version() -> str | None:
    import importlib.metadata

    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version("sglang")
    return None


def _switches(fn: Callable[..., Any], flags: Sequence[str]) -> dict[str, bool]:
    """The configuration's switches as ``init_model_parallel_group`` names them in this
    release (0.5.23 ``use_mscclpp``, 0.5.16 ``use_mscclpp_allreduce``)."""
    params = inspect.signature(fn).parameters
    wanted = {"custom_allreduce": "disable-custom-all-reduce" not in flags,
              "mscclpp": "enable-mscclpp" in flags,
              "torch_symm_mem": "enable-torch-symm-mem" in flags}
    out: dict[str, bool] = {}
    for part, on in wanted.items():
        names = [n for n in params if n.startswith("use_") and part in n]
        if not names and on != (part == "custom_allreduce"):
            raise NativeUnavailable(f"native mode: this SGLang's init_model_parallel_group "
                                    f"has no switch for {part}")
        out.update(dict.fromkeys(names, on))
    return out


def build_group(*, world: int, rank: int, local_rank: int, cuda: bool, flags: Sequence[str]
                ) -> Any:
    """SGLang's tensor-parallel GroupCoordinator over every rank (the default process group
    must exist)."""
    ps = parallel_state()
    backend = "nccl" if cuda else "gloo"
    try:
        ps.init_distributed_environment(world_size=world, rank=rank, local_rank=local_rank,
                                        backend=backend)
        make = ps.init_model_parallel_group
        return make([list(range(world))], local_rank, backend, group_name="tp",
                    **_switches(make, flags))
    except NativeUnavailable:
        raise
    except ImportError as err:  # a lazy import of the group's constructor
        raise NativeUnavailable(f"native mode: SGLang's group does not build: "
                                f"{type(err).__name__}: {err}") from err


def communicators(group: Any) -> dict[str, Any]:
    """The communicator objects a GroupCoordinator holds, by attribute."""
    return {name: value for name, value in vars(group).items()
            if value is not None and type(value).__module__.startswith(COMMUNICATORS)}


class _Watch:
    """Wraps the serving methods of a group's communicators; records the outermost call."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.calls: list[tuple[str, str, str]] = []  # (attribute, method, class)
        self._depth = 0

    def _wrap(self, attr: str, obj: Any, method: str) -> Callable[..., Any]:
        bound = getattr(obj, method)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self._depth == 0:
                self.calls.append((attr, method, type(obj).__name__))
            self._depth += 1
            try:
                return bound(*args, **kwargs)
            finally:
                self._depth -= 1
        return wrapper

    @contextlib.contextmanager
    def active(self) -> Iterator[_Watch]:
        undo: list[tuple[Any, str, Any]] = []
        try:
            for attr, obj in communicators(self.group).items():
                for method in dir(type(obj)):
                    if not (SERVING.match(method) and callable(getattr(obj, method, None))):
                        continue
                    try:  # an object without a __dict__ (slots) is left unwatched
                        before = vars(obj).get(method)
                        setattr(obj, method, self._wrap(attr, obj, method))
                    except (AttributeError, TypeError):
                        continue
                    undo.append((obj, method, before))
            yield self
        finally:
            for obj, method, before in reversed(undo):
                if before is None:
                    obj.__dict__.pop(method, None)
                else:
                    setattr(obj, method, before)

    def served(self) -> tuple[str, str]:
        """(path, served_by) of the first call seen."""
        if not self.calls:
            group = getattr(self.group, "device_group", None)
            backend = ""
            with contextlib.suppress(Exception):
                backend = f" ({torch.distributed.get_backend(group)})"
            return FALLBACK, f"torch.distributed on the group's device group{backend}"
        attr, method, cls = self.calls[0]
        return PATHS.get(attr, attr.removesuffix("_comm")), f"{attr}.{method} ({cls})"


def v2_algorithm(comm: Any, nbytes: int, graph: bool) -> str | None:
    """The algorithm CustomAllReduceV2 picks for ``nbytes`` in graph (or eager) mode, asked
    through its private ``_pick_config`` (0.5.16 and 0.5.23); None where it cannot say."""
    pick = getattr(comm, "_pick_config", None)
    if pick is None:
        return None
    with contextlib.suppress(Exception):
        config = pick(nbytes, graph)
        algo = getattr(config, "algo", None)
        if algo is not None:
            return str(getattr(algo, "value", None) or getattr(algo, "name", algo))
    return None


class NativeCollectives(Collectives):
    """Every collective through SGLang's GroupCoordinator (``group``)."""

    def __init__(self, group: Any, *, predicted: str, cuda: bool, graph: bool) -> None:
        self.group, self.predicted, self.cuda, self.graph = group, predicted, cuda, graph
        self.path = "native"
        self.gather_path = "native"
        self._recorded: dict[str, Any] = {}

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.group.all_reduce(t)
        return out

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        gather = getattr(self.group, "all_gather_into_tensor", None)
        if gather is not None:
            gather(out, t)
        else:  # a release without it: the concatenating all_gather along dim 0
            out.copy_(self.group.all_gather(t, dim=0))

    def capture(self) -> contextlib.AbstractContextManager[Any]:
        """SGLang's capture context (graph mode on GPUs): what its graph runner wraps every
        capture in; graphs replay after it exits."""
        if self.cuda and self.graph:
            return self.group.graph_capture()
        return contextlib.nullcontext()

    def prepare(self, *, hidden: int, rows: int) -> None:
        """Communicators that size or tune themselves before capture (0.5.23's PCIe-IPC
        ``prepare(hidden=, max_rows=)``, as SGLang's runner calls it)."""
        for comm in communicators(self.group).values():
            prepare = getattr(comm, "prepare", None)
            if prepare is None:
                continue
            params = inspect.signature(prepare).parameters
            if "hidden" in params:
                prepare(hidden=hidden, **({"max_rows": rows} if "max_rows" in params else {}))

    def observe(self, buf: torch.Tensor, out: torch.Tensor, src: torch.Tensor) -> None:
        """One all-reduce and one all-gather on every rank alike, watched: which communicator
        served each (in the capture context, so the graph mode's choice)."""
        watch = _Watch(self.group)
        with watch.active():
            self.all_reduce(buf)
        self.path, served = watch.served()
        if self.path == PATHS["ca_comm"]:
            algo = v2_algorithm(getattr(self.group, "ca_comm", None),
                                buf.numel() * buf.element_size(), self.cuda and self.graph)
            served += f", {algo}" if algo else ""
        self.path = "native:" + self.path
        gather = _Watch(self.group)
        with gather.active():
            self.all_gather(out, src)
        self.gather_path, gathered = gather.served()
        self.gather_path = "native:" + self.gather_path
        self._recorded = {"allreduce_served_by": served, "allgather_served_by": gathered,
                         "sglang_version": sglang_version(),
                         "native_communicators": ", ".join(sorted(
                             f"{a} ({type(c).__name__})"
                             for a, c in communicators(self.group).items()
                             if not getattr(c, "disabled", False))),
                         "native_fusion": "not fused: SGLang's all_reduce, then add and RMSNorm"
                         if self.predicted == dispatch.FUSION else None}

    def record(self) -> dict[str, Any]:
        return dict(self._recorded)


def build(predicted: str, *, world: int, rank: int, local_rank: int, cuda: bool, graph: bool,
          flags: Sequence[str]) -> NativeCollectives:
    """The native collectives of this rank (the default process group exists)."""
    if predicted in NATIVE_NOT_MODELLED:
        raise ValueError(f"the proxy does not run the {predicted} path in native mode: "
                         f"{NATIVE_NOT_MODELLED[predicted]}")
    if not cuda and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise NativeUnavailable("native mode on CPU runs SGLang's CPU engine: set "
                                "SGLANG_USE_CPU_ENGINE=1 (the launcher's plan does)")
    group = build_group(world=world, rank=rank, local_rank=local_rank, cuda=cuda, flags=flags)
    return NativeCollectives(group, predicted=predicted, cuda=cuda, graph=graph)
