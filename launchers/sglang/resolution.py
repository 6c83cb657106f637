"""SGLang's own argument resolution, run inside SGLang's interpreter (part of the resident
reader, sent along with ``parser_server.py``; it imports nothing of servetune).

A parsed command becomes SGLang's ``ServerArgs`` and goes through SGLang's own resolution and
checks, whichever way the installed release runs them: 0.5.16 resolves in
``ServerArgs.__post_init__`` (``_handle_*`` methods), 0.5.23 in ``ServerArgs.resolve_once``
(``arg_groups/pipeline.py``, one ``run_hook`` per step). The answer is what the server would
resolve (its ``resolved_dict()`` or the record's fields) or SGLang's own rejection.

On a machine without an accelerator (CI, a laptop planning for a GPU node) some steps ask
the hardware: resolution then runs as for a CUDA device (``--device cuda``), each step that
needs what is not here is skipped and named, and modules SGLang imports at module level but
never uses to resolve (``torchvision``: its PyPI build does not load beside a CPU torch)
stand in as empty placeholders, named too. Where an accelerator is present nothing is
skipped or stood in for.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
import traceback
import types
from collections.abc import Iterator, Sequence
from typing import Any

# Raised by a check that rejects the arguments (SGLang asserts and raises ValueError) ...
REJECTIONS = (AssertionError, ValueError)
# ... and, where every step ran (an accelerator here), what its argument code trips over
# (0.5.16 compares a missing topk with ``>``: a TypeError at launch)
TRIPS = (TypeError, AttributeError, KeyError, IndexError)
# ... in its argument code (0.5.16: server_args.py; 0.5.23: arg_groups/ too). Raised elsewhere
# (transformers reading a model's config, say), it is no verdict on the arguments.
ARGUMENT_CODE = ("/sglang/srt/server_args.py", "/sglang/srt/arg_groups/")
# Module-level imports of SGLang that resolution never uses, and may fail on a CPU box.
PLACEHOLDER_ROOTS = ("torchvision",)
# Fields that differ between two launches of one configuration (ports, addresses, paths
# of the launch itself), left out of what "resolves alike" compares.
PER_LAUNCH = frozenset({"host", "port", "nccl_port", "dist_init_addr", "launch_command",
                        "metrics_http_port", "grpc_port", "file_storage_path",
                        "random_seed"})


class _Placeholder(types.ModuleType):
    """An empty module: any attribute is another placeholder, callable, never used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Placeholder(f"{self.__name__}()")


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: answers only for roots that nothing else can import."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        root = fullname.split(".")[0]
        if root not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _loads(root: str) -> bool:
    try:
        importlib.import_module(root)
        return True
    except Exception:
        sys.modules.pop(root, None)
        return False


_installed: list[_PlaceholderFinder] = []


def install_placeholders() -> _PlaceholderFinder:
    """Placeholders for the roots that are absent or do not load here (once per process).
    transformers decides what is available first (a placeholder must not look installed to
    it)."""
    if _installed:
        return _installed[0]
    with contextlib.suppress(Exception):
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()
    broken = [r for r in PLACEHOLDER_ROOTS
              if importlib.util.find_spec(r) is None or not _loads(r)]
    finder = _PlaceholderFinder(broken)
    for root in broken:  # a half-imported broken package must not shadow the placeholder
        for name in [m for m in sys.modules if m == root or m.startswith(root + ".")]:
            sys.modules.pop(name, None)
    if broken:
        sys.meta_path.append(finder)
    _installed.append(finder)
    return finder


def accelerator_present() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _raised_in_argument_code(err: BaseException) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and any(part in frames[-1].filename for part in ARGUMENT_CODE)


def _rejection_text(err: BaseException) -> str:
    """SGLang's message; for a bare ``assert``, the asserting statement and where it is."""
    message = str(err).strip()
    if message:
        return f"{type(err).__name__}: {message}"
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return type(err).__name__
    last = frames[-1]
    statement = _statement(last.filename, last.lineno or 0)
    where = f"{last.filename.rsplit('/sglang/', 1)[-1]}:{last.lineno} in {last.name}"
    return f"{type(err).__name__} in {where}: {statement}"


def _statement(filename: str, lineno: int) -> str:
    """The whole ``assert`` statement around ``lineno`` (it may span lines)."""
    lines = [linecache.getline(filename, n) for n in range(max(1, lineno - 8), lineno + 4)]
    start = lineno - max(1, lineno - 8)
    for i in range(start, -1, -1):
        if lines[i].lstrip().startswith("assert"):
            start = i
            break
    text = []
    depth = 0
    for line in lines[start:]:
        text.append(line.strip())
        depth += line.count("(") - line.count(")") + line.count("[") - line.count("]")
        if depth <= 0 and not line.rstrip().endswith("\\"):
            break
    return " ".join(text)[:400]


class _Steps:
    """Runs each resolution step so that one that needs absent hardware is skipped (named)
    and the rest still run; a rejection stops resolution as SGLang would."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def wrap(self, step: Any, name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return step(*args, **kwargs)
            except REJECTIONS:
                raise
            except Exception as err:
                self.skipped.append(f"{name} ({type(err).__name__}: {str(err)[:160]})")
                return None
        return run

    @contextlib.contextmanager
    def patched(self, server_args_class: type) -> Iterator[None]:
        """0.5.23-style: the pipeline's ``run_hook``; 0.5.16-style: the ``_handle_*``
        methods that ``__post_init__`` calls in order."""
        restore: list[tuple[Any, str, Any]] = []
        pipeline = sys.modules.get("sglang.srt.arg_groups.pipeline")
        if pipeline is None and hasattr(server_args_class, "resolve_once"):
            with contextlib.suppress(Exception):
                import sglang.srt.arg_groups.pipeline as pipeline_module

                pipeline = pipeline_module
        if pipeline is not None and hasattr(pipeline, "run_hook"):
            original = pipeline.run_hook

            def run_hook(builtin: Any, server_args: Any) -> None:
                self.wrap(original, getattr(builtin, "__name__", str(builtin)))(
                    builtin, server_args)

            restore.append((pipeline, "run_hook", original))
            setattr(pipeline, "run_hook", run_hook)  # noqa: B010 - a module of any release
        else:
            for name, member in list(vars(server_args_class).items()):
                if name.startswith(("_handle_", "_validate_")) and callable(member):
                    restore.append((server_args_class, name, member))
                    setattr(server_args_class, name, self.wrap(member, name))
        try:
            yield
        finally:
            for owner, name, original_member in restore:
                setattr(owner, name, original_member)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def resolved_fields(server_args: Any) -> dict[str, Any]:
    """What the server resolved: ``resolved_dict()`` where the release has it, else the
    record's dataclass fields (0.5.16 resolves in place)."""
    if hasattr(server_args, "resolved_dict"):
        data = server_args.resolved_dict()
    else:
        data = {f.name: getattr(server_args, f.name, None)
                for f in dataclasses.fields(server_args)}
    return {k: _plain(v) for k, v in data.items() if not k.startswith("_")}


def resolve(parser: argparse.ArgumentParser, argvs: Sequence[Sequence[str]],
            rejected: type[Exception]) -> list[dict[str, Any]]:
    """Each argv through SGLang's resolution: ``ok`` (None: could not run), ``error``
    (SGLang's rejection), ``resolved``, ``skipped`` steps, ``placeholders``, ``device``."""
    from sglang.srt.server_args import ServerArgs

    finder = install_placeholders()
    hardware = accelerator_present()
    results = []
    for argv in argvs:
        out: dict[str, Any] = {"ok": None, "error": "", "resolved": None, "skipped": [],
                               "device": None}
        try:
            namespace = parser.parse_args(list(argv))
        except rejected as err:
            out.update(ok=False, error=str(err), stage="parse")
            results.append(out)
            continue
        if not hardware and getattr(namespace, "device", None) is None:
            namespace.device = "cuda"  # as on the GPU node the command is meant for
            out["device"] = "cuda (assumed: no accelerator here)"
        steps = _Steps()
        try:
            with contextlib.ExitStack() as stack:
                if not hardware:
                    stack.enter_context(steps.patched(ServerArgs))
                server_args = ServerArgs.from_cli_args(namespace)
                if hasattr(server_args, "resolve_once"):
                    server_args.resolve_once()
            out.update(ok=True, resolved=resolved_fields(server_args))
        except (*REJECTIONS, *TRIPS) as err:
            trusted = isinstance(err, REJECTIONS) or (hardware and not steps.skipped)
            if trusted and _raised_in_argument_code(err):
                out.update(ok=False, error=_rejection_text(err), stage="resolve")
            else:
                out.update(ok=None, error=f"{type(err).__name__}: {str(err)[:300]}",
                           stage="resolve")
        except Exception as err:
            out.update(ok=None, error=f"{type(err).__name__}: {str(err)[:300]}",
                       stage="resolve")
        out["skipped"] = steps.skipped
        out["placeholders"] = list(finder.roots)
        results.append(out)
    return results
