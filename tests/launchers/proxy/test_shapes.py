"""Shape presets, config.json loading, and the bytes a verify pass reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchers.proxy.geometry import Geometry
from launchers.proxy.shapes import (
    Shape,
    architecture,
    load_shape,
    preset_names,
    reference_key,
    shape_name,
)


def shape(name: str) -> Shape:
    return Shape.from_config(load_shape(name), name)


def test_presets_are_listed_and_load() -> None:
    names = preset_names()
    assert {"kimi-k2.5", "deepseek-v3", "llama-3.1-70b", "tiny", "tiny-dense"} <= set(names)
    for name in names:
        assert shape(name).num_hidden_layers > 0


def test_unknown_shape_names_the_presets() -> None:
    with pytest.raises(ValueError, match=r"llama-3\.1-70b") as err:
        load_shape("no-such-model")
    assert "kimi-k2.5" in str(err.value)


def test_config_json_path_and_folder(tmp_path: Path) -> None:
    config = {"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 4000,
              "num_experts": 8, "moe_intermediate_size": 128, "num_experts_per_tok": 2}
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    for where in (str(folder), str(folder / "config.json")):
        s = Shape.from_config(load_shape(where), shape_name(where))
        assert s.name == "my-model"
        assert (s.n_routed_experts, s.moe_intermediate_size, s.head_dim) == (8, 128, 64)
        assert not s.is_mla


def test_missing_field_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 512}))
    with pytest.raises(ValueError, match="num_attention_heads"):
        Shape.from_config(load_shape(str(path)), "broken")


def test_kimi_text_config_is_read() -> None:
    s = shape("kimi-k2.5")
    assert s.is_mla and s.is_moe
    assert (s.hidden_size, s.num_hidden_layers, s.num_attention_heads) == (7168, 61, 64)
    assert (s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim, s.v_head_dim) == (1536, 512, 64, 128)
    assert (s.n_routed_experts, s.num_experts_per_tok, s.moe_intermediate_size) == (384, 8, 2048)
    assert (s.shared_intermediate, s.first_k_dense_replace, s.vocab_size) == (2048, 1, 163840)
    assert shape("deepseek-v3").n_routed_experts == 256


def test_kimi_bytes_per_pass_tp8() -> None:
    """Hand computed: tp 8, batch 1, 4 draft tokens, 4096 KV entries, bf16; the routed
    experts are INT4 in groups of 32 with a bf16 scale each: 0.5 + 2/32 = 0.5625 bytes per
    weight, so the proxy holds them 0.5625/2 as wide (256 -> 72 per rank)."""
    geo = Geometry(shape("kimi-k2.5"), ranks=8, batch=1, draft_tokens=4, kv_len=4096)
    h, heads = 7168, 8  # 64 heads / 8 ranks
    attention = (h * 1536 + 1536 * heads * 192        # q_a (replicated), q_b
                 + h * 576 + 512 * heads * 256        # kv_a (replicated), kv_b
                 + heads * 128 * h)                   # o_proj
    kv = 4096 * 576
    dense = 3 * h * 18432 // 8
    router, shared = h * 384, 3 * h * 256             # bf16 in the checkpoint
    experts = 32 * 3 * h * 256                         # 4 tokens x top 8 experts
    head = h * 163840 // 8
    int4 = 0.5 + 2 / 32
    expected = 2 * (61 * (attention + kv) + dense + 60 * (router + shared) + head) \
        + 60 * experts * int4
    parts = geo.bytes_per_pass()
    assert parts["total"] == expected == 10_775_035_904
    assert parts["moe"] == 60 * (2 * (router + shared) + experts * int4)
    assert parts["lm_head"] == 2 * head and parts["kv_cache"] == 2 * 61 * kv
    assert geo.expert_pool == 32 and geo.expert_rounds == 1 and geo.moe_width == 72
    bf16 = Geometry(shape("kimi-k2.5"), ranks=8, batch=1, draft_tokens=4, kv_len=4096,
                    quantize=False).bytes_per_pass()
    assert bf16["total"] == expected + 60 * experts * (2 - int4) == 25_968_902_144


def test_deepseek_fp8_bytes_per_pass_tp8() -> None:
    """FP8 in 128x128 blocks with a float32 scale each: 1 + 4/16384 bytes per weight for
    every linear but the router and the LM head; the proxy holds those widths halved."""
    geo = Geometry(shape("deepseek-v3"), ranks=8, batch=1, draft_tokens=4, kv_len=4096)
    fp8 = 1 + 4 / 128**2
    assert geo.shape.quantization is not None
    assert geo.shape.quantization.bytes_per_weight("attention") == fp8
    assert geo.shape.quantization.bytes_per_weight("lm_head") is None
    assert (geo.dense_width, geo.moe_width, geo.shared_width) == (1152, 128, 128)  # 2304, 256
    h, heads = 7168, 16  # 128 heads / 8 ranks

    def w(n: int) -> int:
        return round(n * fp8 / 2)

    attention = (h * w(1536 + 512 + 64) + 1536 * w(heads * 192)
                 + heads * 128 * w(512) + heads * 512 * w(128) + heads * 128 * w(h))
    kv = 4096 * 576
    dense = 3 * h * 1152
    moe = 32 * 3 * h * 128 + h * 256 + 3 * h * 128
    head = h * 129280 // 8
    expected = 2 * (61 * (attention + kv) + 3 * dense + 58 * moe + head)
    assert geo.bytes_per_pass()["total"] == expected == 13_652_578_304


def test_quantization_config_is_read() -> None:
    kimi = shape("kimi-k2.5").quantization
    assert kimi is not None and kimi.method == "compressed-tensors" and kimi.modelled
    assert dict(kimi.part_bytes) == {"routed_experts": 0.5625}  # attention, shared, dense, head
    assert "int4 group 32" in kimi.scheme and shape("kimi-k2.5").quantized
    assert shape("llama-3.1-70b").quantization is None and not shape("tiny").quantized
    config = {**load_shape("tiny"), "quantization_config": {"quant_method": "awq", "bits": 4}}
    awq = Shape.from_config(config, "tiny-awq").quantization
    assert awq is not None and not awq.modelled and awq.part_bytes == ()
    assert Geometry(Shape.from_config(config, "tiny-awq")).bytes_per_pass() == \
        Geometry(shape("tiny")).bytes_per_pass()  # not modelled: read in the model dtype


def test_llama_bytes_per_pass() -> None:
    s = shape("llama-3.1-70b")
    geo = Geometry(s, ranks=8, batch=1, draft_tokens=4, kv_len=4096)
    h = 8192
    attention = h * (8 + 2 * 1) * 128 + 8 * 128 * h   # 8 q heads, 1 KV head per rank
    mlp = 3 * h * 28672 // 8
    kv = 4096 * 2 * 1 * 128
    head = h * 128256 // 8
    assert geo.bytes_per_pass()["total"] == 2 * (80 * (attention + mlp + kv) + head) \
        == 17_543_200_768
    one = Geometry(s, ranks=1, batch=1, draft_tokens=4, kv_len=4096).bytes_per_pass()
    assert one["total"] == 140_345_606_144


def test_many_tokens_share_experts() -> None:
    geo = Geometry(shape("kimi-k2.5"), ranks=8, batch=16, draft_tokens=4, kv_len=16)
    assert geo.expert_pool == 384  # 64 tokens x 8 > 384 experts: every expert is read once
    assert geo.expert_rounds == 2


def test_layer_subset_keeps_the_dense_share() -> None:
    kimi = Geometry(shape("kimi-k2.5"), layers=2)
    assert kimi.layer_kinds() == ("moe", "moe") and kimi.scaled and kimi.scale == 61 / 2
    assert kimi.layer_kinds(full=True) == ("dense",) + ("moe",) * 60
    assert Geometry(shape("tiny"), layers=2).layer_kinds() == ("dense", "moe")
    assert Geometry(shape("deepseek-v3"), layers=61).layer_kinds().count("dense") == 3
    assert not Geometry(shape("tiny")).scaled
    full = Geometry(shape("kimi-k2.5"), layers=2).bytes_per_pass()
    assert full == Geometry(shape("kimi-k2.5")).bytes_per_pass()


@pytest.mark.parametrize("name, ranks", [("tiny", 3), ("llama-3.1-70b", 3), ("tiny", 8)])
def test_heads_must_split_over_ranks(name: str, ranks: int) -> None:
    with pytest.raises(ValueError, match="split"):
        Geometry(shape(name), ranks=ranks)


def test_layers_out_of_range() -> None:
    with pytest.raises(ValueError, match="--layers"):
        Geometry(shape("tiny"), layers=5)


def test_reference_key_changes_with_what_changes_the_output() -> None:
    config = load_shape("tiny")
    base = reference_key("tiny", config, batch=1, ranks=2, dtype="float32")
    assert base == reference_key("tiny", config, batch=1, ranks=2, dtype="float32")
    assert base.startswith("tiny-")
    assert base != reference_key("tiny", config, batch=2, ranks=2, dtype="float32")
    assert base != reference_key("tiny", config, batch=1, ranks=1, dtype="float32")
    assert base != reference_key("tiny", config, batch=1, ranks=2, dtype="bfloat16")


def test_architecture_is_the_top_level_one() -> None:
    """SGLang reads hf_config.architectures[0]: Kimi-K2.5's own, not its text model's."""
    assert architecture("kimi-k2.5") == "KimiK25ForConditionalGeneration"
    assert load_shape("kimi-k2.5")["architectures"] == ["DeepseekV3ForCausalLM"]
    assert architecture("llama-3.1-70b") == "LlamaForCausalLM"
    assert architecture("no-such-model") is None
