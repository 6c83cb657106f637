"""The proxy model on CPU with one rank: shapes, finiteness, determinism, bytes held."""

from __future__ import annotations

import pytest
import torch

from launchers.proxy.comm.collectives import NoCollectives
from launchers.proxy.geometry import FIT_FRACTION, Geometry, fit_layers
from launchers.proxy.model import ProxyModel, approximation
from launchers.proxy.shapes import Shape, load_shape


def geometry(name: str, **kw: int) -> Geometry:
    settings = {"batch": 2, "draft_tokens": 3, "kv_len": 32, "elem_bytes": 4, **kw}
    return Geometry(Shape.from_config(load_shape(name), name), **settings)


@pytest.mark.parametrize("name", ["tiny", "tiny-dense"])
def test_forward_gives_finite_logits(name: str) -> None:
    geo = geometry(name)
    logits = ProxyModel(geo, seed=1).forward()
    assert logits.shape == (6, geo.shape.vocab_size)
    assert logits.dtype == torch.float32
    assert bool(torch.isfinite(logits).all())
    assert 0.1 < float(logits.std()) < 10


def test_both_layer_kinds_run() -> None:
    geo = geometry("tiny")
    assert geo.layer_kinds() == ("dense", "moe", "moe", "moe")
    model = ProxyModel(geo)
    assert "gate_up" in model.layers[0] and "w1" in model.layers[1]
    assert model.layers[1]["w1"].shape[0] == geo.expert_pool == 12  # 6 tokens x top 2


def test_fixed_seed_is_deterministic() -> None:
    geo = geometry("tiny")
    a = ProxyModel(geo, seed=3).forward()
    assert torch.equal(a, ProxyModel(geo, seed=3).forward())
    assert not torch.allclose(a, ProxyModel(geo, seed=4).forward())


def test_bf16_stays_finite() -> None:
    geo = geometry("tiny", elem_bytes=2)
    logits = ProxyModel(geo, dtype=torch.bfloat16).forward()
    assert bool(torch.isfinite(logits.float()).all())


@pytest.mark.parametrize("name, ranks, layers, batch", [
    ("tiny", 1, None, 2), ("tiny", 2, 2, 1), ("tiny", 4, 1, 8), ("tiny-dense", 2, None, 2),
    ("tiny-dense", 4, 3, 1)])
def test_held_bytes_are_the_bytes_counted(name: str, ranks: int, layers: int | None,
                                          batch: int) -> None:
    """The model holds exactly the tensors the accounting counts, so a pass reads them all."""
    geo = geometry(name, ranks=ranks, batch=batch, **({"layers": layers} if layers else {}))
    assert ProxyModel(geo).held_bytes() == geo.bytes_per_pass(full=False)["total"]


INT4_EXPERTS = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                       "strategy": "group", "group_size": 32}}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*",
               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*"]}
FP8_BLOCKS = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}


def quantized(name: str, config: dict[str, object], **kw: int) -> Geometry:
    settings = {"batch": 2, "draft_tokens": 3, "kv_len": 32, "elem_bytes": 4, **kw}
    shape = Shape.from_config({**load_shape(name), "quantization_config": config}, name)
    return Geometry(shape, **settings)


@pytest.mark.parametrize("name, config, ranks", [
    ("tiny", INT4_EXPERTS, 1), ("tiny", FP8_BLOCKS, 1), ("tiny", FP8_BLOCKS, 2),
    ("tiny-dense", FP8_BLOCKS, 1), ("tiny-dense", FP8_BLOCKS, 2), ("tiny-dense", INT4_EXPERTS, 1)])
def test_quantized_parts_are_held_narrower(name: str, config: dict[str, object],
                                           ranks: int) -> None:
    """The held bytes are still the counted bytes, now fewer; the pass still gives logits."""
    geo = quantized(name, config, ranks=ranks)
    plain = Geometry(geo.shape, ranks=ranks, batch=2, draft_tokens=3, kv_len=32, elem_bytes=4,
                     quantize=False)
    model = ProxyModel(geo)
    assert model.held_bytes() == geo.bytes_per_pass(full=False)["total"]
    dense_only_int4 = name == "tiny-dense" and config is INT4_EXPERTS  # nothing quantized
    assert (model.held_bytes() == ProxyModel(plain).held_bytes()) is dense_only_int4
    if ranks == 1:  # more ranks need a process group (test_workload runs them)
        logits = model.forward()
        assert logits.shape == (6, geo.shape.vocab_size) and bool(torch.isfinite(logits).all())


def test_int4_experts_width() -> None:
    geo = quantized("tiny", INT4_EXPERTS)  # float32 on CPU: 0.5625 / 4 of the width
    assert geo.moe_width == round(64 * 0.5625 / 4) == 9
    assert geo.shared_width == 64 and geo.dense_width == 512  # ignored by the checkpoint
    assert ProxyModel(geo).layers[1]["w1"].shape == (12, 256, 18)


def test_many_tokens_per_expert() -> None:
    geo = geometry("tiny", batch=4, draft_tokens=4)  # 16 tokens x 2 > 16 experts
    assert geo.expert_rounds == 2
    logits = ProxyModel(geo).forward()
    assert logits.shape == (16, 1024) and bool(torch.isfinite(logits).all())


def test_collectives_and_head_alone_leave_the_logits_alone() -> None:
    """The pass's output must be its own tensor: the other graphs reuse the gather buffer."""
    geo = geometry("tiny")
    model = ProxyModel(geo)
    logits = model.forward()
    kept = logits.clone()
    model.collectives(4)
    model.gather_only()
    assert model.head_pass().shape == (6, 1024)
    model.forward(NoCollectives())
    assert torch.equal(logits, kept)


def test_compute_only_pass_equals_the_pass_with_one_rank() -> None:
    """One rank: the all-reduces change nothing, so the no-op pass gives the same logits; the
    no-op gather leaves the gather buffer as it was (nothing communicated)."""
    geo = geometry("tiny")
    model = ProxyModel(geo)
    assert torch.equal(model.forward(), model.forward(NoCollectives()))
    model.gather_buf.fill_(7.0)
    model.head_pass(NoCollectives())
    assert bool((model.gather_buf == 7.0).all())


def test_weights_come_from_two_arenas() -> None:
    """Replicated tensors are the same on every rank, shards differ; each arena is one
    allocation (its tensors are views of one storage)."""
    geo = geometry("tiny", ranks=2)
    a, b = ProxyModel(geo, rank=0, seed=5), ProxyModel(geo, rank=1, seed=5)
    assert torch.equal(a.x, b.x) and torch.equal(a.layers[0]["a"], b.layers[0]["a"])
    assert torch.equal(a.layers[1]["router"], b.layers[1]["router"])
    assert not torch.equal(a.layers[0]["q_b"], b.layers[0]["q_b"])
    own = {t.untyped_storage().data_ptr() for layer in a.layers for k, t in layer.items()
           if k not in ("a", "cache", "router")}
    assert len(own) == 1 and a.head_w.untyped_storage().data_ptr() in own
    bound = (3.0 / geo.shape.hidden_size) ** 0.5  # fan-in hidden, scale 1
    assert 0.9 * bound < float(a.layers[0]["gate_up"].abs().max()) <= bound


def test_approximation_is_stated() -> None:
    text = " ".join(approximation())
    for words in ("bf16", "distinct experts", "kv_len", "scaled", "embedding"):
        assert words in text


def test_fit_layers() -> None:
    """The most layers whose bytes fit in FIT_FRACTION of a GPU's memory; None: all fit."""
    geo = Geometry(Shape.from_config(load_shape("llama-3.1-70b"), "llama-3.1-70b"),
                   batch=1, draft_tokens=4, kv_len=4096)
    whole = geo.bytes_per_pass(full=False)["total"]
    assert fit_layers(geo, int(whole / FIT_FRACTION) + 1) is None
    h200 = 150_119_600_128  # 139.8 GiB, as torch reports an H200
    n = fit_layers(geo, h200)
    assert n == 72

    def need(k: int) -> int:
        return Geometry(geo.shape, batch=1, draft_tokens=4, kv_len=4096,
                        layers=k).bytes_per_pass(full=False)["total"]

    assert need(72) <= FIT_FRACTION * h200 < need(73)
    assert fit_layers(geo, 1 << 30) == 1  # nothing fits: 1 layer, and the worker says OOM


def test_widened_outputs_are_contiguous_for_nccl() -> None:
    # A weight held narrower for a quantized checkpoint (DeepSeek-V3's FP8 attention) gives
    # a narrow output tiled back to full width; NCCL refuses strided tensors
    # ("Tensors must be contiguous", seen on the H200), gloo does not.
    import torch

    from launchers.proxy.model import _widen

    wide = _widen(torch.ones(4, 3), 7)
    assert wide.shape == (4, 7) and wide.is_contiguous()
