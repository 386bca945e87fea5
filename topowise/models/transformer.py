"""The decoder-only transformer that `bench train` runs, built from a ModelSpec.

Llama family (also Qwen2, Mistral): RMSNorm (F.rms_norm), rotary attention through
F.scaled_dot_product_attention(is_causal=True) (cuDNN's or flash's kernel on CUDA in bf16), SwiGLU MLP,
grouped-query attention, q/k/v biases when `spec.qkv_bias`, the output projection tied to the
embedding when `spec.tied_embeddings`. GPT-2 family: LayerNorm, GELU MLP, learned positions, biases.
The parameter count equals `spec.params` exactly (tested on the presets, built on the meta device),
and given the same weights the logits equal transformers' LlamaForCausalLM's (tests/unit/
test_model_vs_transformers.py).

The rotary embedding turns interleaved pairs (x[2i], x[2i+1]) of each q and k head (Meta's layout,
torchtitan's), as one complex multiplication in fp32. Hugging Face's checkpoints hold the same
weights in the "rotate half" layout, pairs (x[i], x[i + head_dim/2]): loading one means permuting
each q and k head's rows (`hf_rotary_permutation`), which leaves q.k, and so attention, unchanged.

Speed (research/2026-12-02-h200x1/scripts/vs_torchtitan.py, research/2026-12-02-h200x1/vs-torchtitan/): measured
kernel by kernel against torchtitan 0.2's Llama 3, the two costs were the rotary embedding written
as real arithmetic on the rotate-half layout (its broadcasts over strided views of the qkv output
run PyTorch's slow, non-vectorised elementwise kernel, and roll is another) and gate/up as one
Linear (SiLU and the product read strided halves, and the backward concatenates the halves'
gradients). So q, k, v share one Linear (one matrix product; no cost found) while gate and up are
two, and the rotary embedding is complex. Grouped-query attention hands SDPA the k and v heads as
they are (enable_gqa, `GQA_MODE`) and SDPA tries cuDNN's attention first (`SDPA_PRIORITY`), as
torchtitan does. The model returns logits; the loss is the caller's (the training step computes it
in float32 from the bf16 logits).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from topowise.errors import UsageError
from topowise.models.spec import ModelSpec

INIT_STD = 0.02  # GPT-2 / Llama initialisation of linear and embedding weights
NORM_EPS = 1e-5
ROPE_THETA = 500000.0  # Llama 3 config.json rope_theta


# How grouped-query attention reaches SDPA: "sdpa" passes the kv heads as they are with
# enable_gqa=True (the flash and cuDNN kernels read each kv head for its group of query heads);
# "expand" views them at the full head count (expand + reshape, one copy); "repeat" is
# repeat_interleave (one copy). research/2026-12-02-h200x1/scripts/vs_torchtitan.py times each.
GQA_MODES = ("sdpa", "expand", "repeat")
GQA_MODE = "sdpa"
# SDPA's kernels in order of preference: "cudnn" puts cuDNN's attention first, then flash, then the
# rest (torchtitan's ScaledDotProductAttention does the same); None: PyTorch's own order (flash first).
SDPA_PRIORITY: str | None = "cudnn"


def rotary_tables(seq_len: int, head_dim: int, device=None, theta: float = ROPE_THETA
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angle each position turns each of the head_dim / 2 pairs by: (seq_len, head_dim / 2),
    fp32 (Llama's inverse frequencies theta^(-2i / head_dim))."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def rotate_complex(x: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """x (..., head_dim) with its pairs (x[2i], x[2i+1]) as complex numbers times `turn` (complex64,
    broadcast to (..., head_dim / 2)), in fp32, back in x's dtype: three kernels (the upcast, which
    reads x where it lies, the product, the downcast), each over contiguous data."""
    z = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(z * turn).flatten(-2).type_as(x)


def rotate_real(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The same rotation in real arithmetic, for torch.compile (Inductor fuses it into one kernel; it
    does not generate code for complex numbers)."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).type_as(x)


def hf_rotary_permutation(head_dim: int) -> torch.Tensor:
    """Row order that takes one head of a Hugging Face q or k projection (rotate-half pairs (i, i + d/2))
    to this model's interleaved pairs (2i, 2i + 1): rows 0, d/2, 1, d/2 + 1, ..."""
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=-1).flatten()


def _sdpa_kernels():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.MATH]
    return sdpa_kernel(order, set_priority=True)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, rotary: bool, norm_eps: float = NORM_EPS):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        bias = spec.qkv_bias
        self.qkv = nn.Linear(spec.hidden_size, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=bias)
        self.out = nn.Linear(self.heads * self.head_dim, spec.hidden_size, bias=spec.family == "gpt2")
        self.rotary = rotary
        # Qwen3: each query and key head RMS-normalised (its own head_dim weights) before rotary
        self.q_norm = RMSNorm(self.head_dim, norm_eps) if spec.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, norm_eps) if spec.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """cos and sin: the fp32 (seq, head_dim / 2) rotary tables (rotary_tables)."""
        b, s, _ = x.shape
        heads, kv = self.heads, self.kv_heads
        q, k, v = self.qkv(x).view(b, s, heads + 2 * kv, self.head_dim).split([heads, kv, kv], dim=2)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither (spec.qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:
            # q and k rotated into their own (batch, seq, heads, head_dim) tensors, the layout SDPA's
            # kernels take as it is; v copied too, so that no view keeps the qkv output alive for backward
            cos, sin = cos[:s, None].float(), sin[:s, None].float()  # over the heads; fp32 if the model was cast
            if torch.compiler.is_compiling():
                q, k = rotate_real(q, cos, sin), rotate_real(k, cos, sin)
            else:
                turn = torch.complex(cos, sin)
                q, k = rotate_complex(q, turn), rotate_complex(k, turn)
            v = v.contiguous()
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        gqa: dict[str, Any] = {}  # enable_gqa only where used: torch < 2.5 lacks the keyword
        if kv != heads:  # grouped-query: each k/v head serves heads/kv query heads
            if GQA_MODE == "sdpa":
                gqa = {"enable_gqa": True}
            elif GQA_MODE == "expand":
                group = heads // kv
                k = k[:, :, None].expand(b, kv, group, s, self.head_dim).reshape(b, heads, s, self.head_dim)
                v = v[:, :, None].expand(b, kv, group, s, self.head_dim).reshape(b, heads, s, self.head_dim)
            else:
                k = k.repeat_interleave(heads // kv, dim=1)
                v = v.repeat_interleave(heads // kv, dim=1)
        if SDPA_PRIORITY == "cudnn" and q.is_cuda:
            with _sdpa_kernels():
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        return self.out(y.transpose(1, 2).reshape(b, s, heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GeluMlp(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.up = nn.Linear(spec.hidden_size, spec.intermediate_size)
        self.down = nn.Linear(spec.intermediate_size, spec.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    """One pre-norm transformer layer: the unit that FSDP shards and activation checkpointing wraps."""

    def __init__(self, spec: ModelSpec, norm_eps: float = NORM_EPS):
        super().__init__()
        llama = spec.family != "gpt2"
        norm = (lambda: RMSNorm(spec.hidden_size, norm_eps)) if llama else (lambda: nn.LayerNorm(spec.hidden_size))
        self.attn_norm, self.mlp_norm = norm(), norm()
        self.attn = Attention(spec, rotary=llama, norm_eps=norm_eps)
        self.mlp = SwiGLU(spec) if llama else GeluMlp(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """rope_theta and norm_eps: Llama 3's unless given (a config.json's rope_theta, rms_norm_eps); they
    change the numbers, not the cost."""

    rope_cos: torch.Tensor  # buffers (register_buffer): declared so that they read as tensors
    rope_sin: torch.Tensor

    def __init__(self, spec: ModelSpec, max_seq_len: int = 4096, *, rope_theta: float = ROPE_THETA,
                 norm_eps: float = NORM_EPS):
        super().__init__()
        if spec.family not in ("llama", "gpt2"):
            raise UsageError(f"model family {spec.family!r} is not built by bench train; llama and gpt2 are")
        if (spec.hidden_size % spec.num_heads and not spec.attention_head_dim) or spec.num_heads % spec.num_kv_heads:
            raise UsageError(f"{spec.name}: hidden_size {spec.hidden_size} must divide into {spec.num_heads} heads "
                             f"(or the config give head_dim) and {spec.num_heads} heads into {spec.num_kv_heads} "
                             "key/value heads")
        if spec.max_positions and max_seq_len > spec.max_positions:
            raise UsageError(f"{spec.name} has {spec.max_positions} learned positions: use --seq-len "
                             f"{spec.max_positions} or less, not {max_seq_len}")
        self.spec, self.max_seq_len, self.rope_theta = spec, max_seq_len, rope_theta
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.positions = nn.Embedding(spec.max_positions, spec.hidden_size) if spec.max_positions else None
        self.layers = nn.ModuleList(Block(spec, norm_eps) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, norm_eps) if spec.family != "gpt2" else nn.LayerNorm(spec.hidden_size)
        self.lm_head = None if spec.tied_embeddings else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        # Rotary tables are buffers (not parameters): recomputed by init_weights after materialising.
        cos, sin = rotary_tables(max_seq_len, spec.head_dim, device=self.embed.weight.device, theta=rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        s = tokens.shape[1]
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, weight)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic initialisation (same seed, same device type -> same weights on every strategy).

        Call on the full, materialised model before any wrapping; output projections are scaled by
        1/sqrt(2 * layers) as in GPT-2.
        """
        torch.manual_seed(seed)
        out_std = INIT_STD / math.sqrt(2 * self.spec.num_layers)
        for name, module in self.named_modules():  # a fixed order: the same draws on every strategy
            if isinstance(module, (RMSNorm, nn.LayerNorm)):
                nn.init.ones_(module.weight)
                bias = getattr(module, "bias", None)  # LayerNorm's; RMSNorm has none
                if bias is not None:
                    nn.init.zeros_(bias)
            elif isinstance(module, nn.Linear):
                std = out_std if name.endswith((".out", ".down")) else INIT_STD
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, INIT_STD)
        cos, sin = rotary_tables(self.max_seq_len, self.spec.head_dim, device=self.rope_cos.device,
                                 theta=self.rope_theta)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)


def build_model(spec: ModelSpec, max_seq_len: int, device: str, seed: int) -> Transformer:
    """Build on the meta device (no memory), materialise on `device`, initialise from `seed`."""
    with torch.device("meta"):
        model = Transformer(spec, max_seq_len)
    model.to_empty(device=device)
    model.init_weights(seed)
    return model
