"""The proxy's geometry: per-rank sizes of a tensor-parallel decoder stack with a real
model's shapes, and the bytes one verify pass reads. No torch here.

One verify pass over T = batch x draft tokens, on each of t ranks:
  per layer: RMSNorm, attention, all_reduce, residual, RMSNorm, MLP or MoE, all_reduce, residual
  at the end: RMSNorm, LM head (vocab split over ranks), all_gather of the logits
so 2 all-reduces of [T x hidden] per layer and one all-gather of [T x vocab/t], as the
server's verify pass does under tensor parallelism.

Bytes read per pass, per GPU (``Geometry.bytes_per_pass``), e = bytes per element
(2 for bf16), H/KV heads, d head dim, P = min(experts, T x top_k):
  attention GQA  hidden x (H/t + 2 KV/t) d + (H/t) d x hidden     (KV/t is at least 1: replicated)
  attention MLA  hidden x (q_lora + kv_lora + rope) [replicated] + q_lora x (H/t)(nope + rope)
                 + kv_lora x (H/t)(nope + v) [kv_b_proj, absorbed] + (H/t) v x hidden
  KV cache       GQA batch x kv_len x 2 (KV/t) d; MLA batch x kv_len x (kv_lora + rope) [replicated]
  dense MLP      3 x hidden x intermediate/t
  MoE            P x 3 x hidden x moe_intermediate/t + router hidden x experts
                 + shared experts 3 x hidden x shared_intermediate/t
  LM head        hidden x ceil(vocab/t)
all times e. A part the checkpoint quantizes (``shapes.Quantization``: Kimi-K2.5's INT4 routed
experts, DeepSeek-V3's FP8 linears) is held narrower, so that the proxy reads the bytes the
server reads: the width that part's weights are counted with above (an MLP or expert
intermediate size, an attention or LM head output width) becomes w x b / e, rounded, where b is
the checkpoint's bytes per weight with scales (0.5 + 2/32 for INT4 in groups of 32 with bf16
scales; 1 + 4/128^2 for FP8 in 128x128 blocks). ``bytes_per_pass`` counts what the proxy
reads, the effective bytes (``Geometry(..., quantize=False)`` counts the model dtype). The proxy
holds exactly these tensors, so the bytes it reads are the bytes counted (a test checks this).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launchers.proxy.shapes import Shape

FIT_FRACTION = 0.85  # of a GPU's total memory that the weights and caches may take when fitted


def fit_layers(geo: Geometry, memory: int) -> int | None:
    """The most layers of ``geo``'s model whose weights and caches take at most FIT_FRACTION
    of ``memory`` bytes per GPU (at least 1); None when the whole model fits. Deterministic for
    a GPU model (total memory, not free memory), so every trial of an experiment runs the same
    layers and shares one correctness reference."""
    budget = FIT_FRACTION * memory
    n = geo.shape.num_hidden_layers
    if replace(geo, layers=None).bytes_per_pass(full=False)["total"] <= budget:
        return None
    fit = 1
    for k in range(2, n):
        if replace(geo, layers=k).bytes_per_pass(full=False)["total"] > budget:
            break
        fit = k
    return fit


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Geometry:
    """Per-rank sizes of one proxy run, and the bytes a verify pass reads."""

    shape: Shape
    ranks: int = 1
    batch: int = 1
    draft_tokens: int = 1
    kv_len: int = 1
    layers: int | None = None  # layers run; None: all
    elem_bytes: int = 2
    quantize: bool = True  # hold quantized parts at the checkpoint's bytes (False: as dtype)

    def __post_init__(self) -> None:
        s, t = self.shape, self.ranks
        if s.num_attention_heads % t:
            raise ValueError(f"{s.name}: {s.num_attention_heads} attention heads do not split "
                             f"over {t} ranks")
        kv = s.num_key_value_heads
        if not s.is_mla and (kv % t if kv >= t else t % kv):
            raise ValueError(f"{s.name}: {kv} KV heads do not split over {t} ranks")
        if not s.is_mla and (s.num_attention_heads // t) % self.kv_heads:
            raise ValueError(f"{s.name}: heads per rank not a multiple of KV heads per rank")
        if self.layers is not None and not 1 <= self.layers <= s.num_hidden_layers:
            raise ValueError(f"{s.name}: --layers must be in [1, {s.num_hidden_layers}]")

    # ------------------------------------------------------------ sizes
    @property
    def tokens(self) -> int:
        return self.batch * self.draft_tokens

    @property
    def layers_run(self) -> int:
        return self.layers or self.shape.num_hidden_layers

    @property
    def scaled(self) -> bool:
        return self.layers_run < self.shape.num_hidden_layers

    @property
    def scale(self) -> float:
        return self.shape.num_hidden_layers / self.layers_run

    @property
    def heads(self) -> int:
        return self.shape.num_attention_heads // self.ranks

    @property
    def kv_heads(self) -> int:
        return max(1, self.shape.num_key_value_heads // self.ranks)

    @property
    def intermediate(self) -> int:
        return _ceil_div(self.shape.intermediate_size, self.ranks)

    @property
    def moe_intermediate(self) -> int:
        return _ceil_div(self.shape.moe_intermediate_size, self.ranks)

    @property
    def shared_intermediate(self) -> int:
        return _ceil_div(self.shape.shared_intermediate, self.ranks)

    @property
    def vocab_shard(self) -> int:
        return _ceil_div(self.shape.vocab_size, self.ranks)

    def width(self, part: str, n: int) -> int:
        """The width ``n`` of a weight of ``part`` as held: scaled by the checkpoint's bytes
        per weight over the proxy's bytes per element when the checkpoint quantizes it."""
        q = self.shape.quantization
        b = q.bytes_per_weight(part) if q is not None and self.quantize else None
        if b is None or b >= self.elem_bytes:
            return n
        return max(1, round(n * b / self.elem_bytes))

    @property
    def dense_width(self) -> int:
        return self.width("dense_mlp", self.intermediate)

    @property
    def moe_width(self) -> int:
        return self.width("routed_experts", self.moe_intermediate)

    @property
    def shared_width(self) -> int:
        return self.width("shared_experts", self.shared_intermediate)

    @property
    def expert_pool(self) -> int:
        """Distinct experts a pass reaches per layer (each token its own top_k)."""
        return min(self.shape.n_routed_experts, self.tokens * self.shape.num_experts_per_tok)

    @property
    def expert_rounds(self) -> int:
        """Tokens per expert: more than 1 once tokens x top_k exceeds the experts."""
        return _ceil_div(self.tokens * self.shape.num_experts_per_tok, self.expert_pool)

    def layer_kinds(self, full: bool = False) -> tuple[str, ...]:
        """``dense`` or ``moe`` per layer (run, or the whole model with ``full``)."""
        s = self.shape
        n = s.num_hidden_layers if full else self.layers_run
        if not s.is_moe:
            return ("dense",) * n
        k = s.first_k_dense_replace
        dense = k if n >= s.num_hidden_layers else min(k, int(n * k / s.num_hidden_layers + 0.5))
        return ("dense",) * dense + ("moe",) * (n - dense)

    # ------------------------------------------------------------ parameters per rank
    def attention_params(self) -> int:
        s, h, hl = self.shape, self.shape.hidden_size, self.heads

        def w(n: int) -> int:
            return self.width("attention", n)

        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, nope, rope = s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim
            q_lora = s.q_lora_rank or 0
            a = h * w(q_lora + lat + rope)  # q_a and kv_a (replicated)
            q_b = (q_lora or h) * w(hl * (nope + rope))
            kv_b = hl * nope * w(lat) + hl * lat * w(s.v_head_dim)  # absorbed: k_c, v_c
            return a + q_b + kv_b + hl * s.v_head_dim * w(h)
        d = s.head_dim
        return h * w((hl + 2 * self.kv_heads) * d) + hl * d * w(h)

    def kv_cache_elems(self) -> int:
        s = self.shape
        if s.is_mla:
            assert s.kv_lora_rank is not None
            return self.batch * self.kv_len * (s.kv_lora_rank + s.qk_rope_head_dim)
        return self.batch * self.kv_len * 2 * self.kv_heads * s.head_dim

    def dense_params(self) -> int:
        return 3 * self.shape.hidden_size * self.dense_width

    def moe_params(self) -> int:
        h = self.shape.hidden_size
        routed = self.expert_pool * 3 * h * self.moe_width
        return routed + h * self.shape.n_routed_experts + 3 * h * self.shared_width

    def head_params(self) -> int:
        return self.shape.hidden_size * self.width("lm_head", self.vocab_shard)

    def bytes_per_pass(self, full: bool = True) -> dict[str, int]:
        """Bytes one verify pass reads on one GPU, by part (``full``: the whole model)."""
        kinds = self.layer_kinds(full)
        n, e = len(kinds), self.elem_bytes
        parts = {
            "attention": n * self.attention_params() * e,
            "kv_cache": n * self.kv_cache_elems() * e,
            "dense_mlp": kinds.count("dense") * self.dense_params() * e,
            "moe": kinds.count("moe") * self.moe_params() * e,
            "lm_head": self.head_params() * e,
        }
        parts["total"] = sum(parts.values())
        return parts

    def describe(self) -> dict[str, object]:
        q = self.shape.quantization
        return {"tokens": self.tokens, "layers_run": self.layers_run, "scaled": self.scaled,
                "num_hidden_layers": self.shape.num_hidden_layers,
                "heads_per_rank": self.heads, "kv_heads_per_rank": self.kv_heads,
                "expert_pool": self.expert_pool if self.shape.is_moe else 0,
                "layer_kinds": "".join(k[0] for k in self.layer_kinds()),
                "quantization": q.describe() if q is not None else None}
