"""How many layers of a model the proxy runs on the trial's GPUs (no --layers given)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launchers.proxy.shapes import Shape, shape_name


def fit_layers_for(shape_config: Mapping[str, Any], model: str, gpu_ids: tuple[str, ...], *,
                   ranks: int, batch: int, draft_tokens: int, kv_len: int
                   ) -> tuple[int | None, str | None]:
    """No --layers on GPUs: every layer when the model fits, else the most that fit in
    FIT_FRACTION of the smallest GPU's total memory (NVML); without NVML the worker fits them
    itself (``--fit-layers``). Returns (layers or None for all, a note or None)."""
    from launchers import gpu
    from launchers.proxy.geometry import FIT_FRACTION, Geometry, fit_layers

    try:
        geo = Geometry(Shape.from_config(shape_config, shape_name(model)), ranks=ranks,
                       batch=batch, draft_tokens=draft_tokens, kv_len=kv_len)
    except ValueError:
        return None, None  # preflight says why
    total = gpu.memory_total(gpu_ids)
    if total is None:
        return None, (f"no NVML here: if the whole model does not fit, the ranks run the most "
                      f"layers that fit in {FIT_FRACTION:.0%} of GPU memory (scaled: true)")
    n = fit_layers(geo, total)
    if n is None:
        return None, None
    need = geo.bytes_per_pass(full=False)["total"]
    return n, (f"fitted: the whole model needs {need / 2**30:.1f} GiB per GPU, more than "
               f"{FIT_FRACTION:.0%} of {total / 2**30:.1f} GiB; set --layers to choose")
