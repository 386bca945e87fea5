"""The decoder-only transformer that `bench train` runs, built from a ModelSpec.

Llama family (also Qwen2, Mistral): RMSNorm (F.rms_norm), rotary attention through
F.scaled_dot_product_attention(is_causal=True) (cuDNN's or flash's kernel on CUDA in bf16), SwiGLU MLP,
grouped-query attention, q/k/v biases when `spec.qkv_bias`, the output projection tied to the
embedding when `spec.tied_embeddings`. GPT-2 family: LayerNorm, GELU MLP, learned positions, biases.
The parameter count equals `spec.params` exactly (tested on the presets, built on the meta device),
and given the same weights the logits equal transformers' LlamaForCausalLM's (tests/unit/
test_model_vs_transformers.py): the rotary layout is Hugging Face's "rotate half".

Speed (research/2026-12-02-h200x1/scripts/vs_torchtitan.py, research/2026-12-01-h200x1/vs-torchtitan/): the rotary
embedding is x cos + roll(x sin'), four elementwise passes, no cat of negated halves and no copy;
its tables are cast to the compute dtype once per forward, not once per block. Grouped-query
attention hands SDPA the k and v heads as they are (enable_gqa, `GQA_MODE`) rather than
materialising them at the full head count, and SDPA tries cuDNN's attention first (`SDPA_PRIORITY`),
as torchtitan does. On one H200 this is 1.02-1.09x torchtitan 0.2's step time at 0.4B-1.2B (0.87x
for 0.37B under FSDP2), from 1.01-1.13x before.

q, k, v share one Linear and gate/up share one Linear: the same parameters as separate matrices,
one matrix product instead of three (or two) per layer. The model returns logits; the loss is the
caller's (the training step computes it in float32 from the bf16 logits).
"""

from __future__ import annotations

import math

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
    """cos and sin of shape (seq_len, head_dim) in the Hugging Face "rotate half" layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rolled_sin(sin: torch.Tensor) -> torch.Tensor:
    """(sin2, -sin1) of the halves sin = (sin1, sin2): roll(x * rolled_sin(sin), half) = rotate_half(x) * sin,
    rotate_half(x) = (-x2, x1) being Hugging Face's."""
    half = sin.shape[-1] // 2
    return torch.cat((sin[..., half:], -sin[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_rolled: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin with the same products and sum (bit for bit in fp32), in four
    elementwise passes and no copy: the first multiplications read x where it lies (a strided view of
    the qkv output) and write a fresh contiguous tensor, which roll then moves."""
    return x * cos + torch.roll(x * sin_rolled, x.shape[-1] // 2, dims=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Hugging Face's apply_rotary_pos_emb for one tensor, from the plain tables."""
    return _rope(x, cos, rolled_sin(sin))


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
    def __init__(self, spec: ModelSpec, rotary: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        bias = spec.qkv_bias
        self.qkv = nn.Linear(spec.hidden_size, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=bias)
        self.out = nn.Linear(self.heads * self.head_dim, spec.hidden_size, bias=spec.family == "gpt2")
        self.rotary = rotary

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """cos and sin: (seq, head_dim) tables in the compute dtype, sin as rolled_sin (Transformer.forward)."""
        b, s, _ = x.shape
        heads, kv = self.heads, self.kv_heads
        q, k, v = self.qkv(x).view(b, s, heads + 2 * kv, self.head_dim).split([heads, kv, kv], dim=2)
        if self.rotary:
            # q and k rotated into their own (batch, seq, heads, head_dim) tensors, the layout SDPA's
            # kernels take as it is; v copied too, so that no view keeps the qkv output alive for backward
            cos, sin = cos[:s, None], sin[:s, None]  # broadcast over the heads
            q, k, v = _rope(q, cos, sin), _rope(k, cos, sin), v.contiguous()
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        gqa = {}
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
        self.w1 = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.w3 = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.w1(x)) * self.w3(x))


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
        self.attn = Attention(spec, rotary=llama)
        self.mlp = SwiGLU(spec) if llama else GeluMlp(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """rope_theta and norm_eps: Llama 3's unless given (a config.json's rope_theta, rms_norm_eps); they
    change the numbers, not the cost."""

    def __init__(self, spec: ModelSpec, max_seq_len: int = 4096, *, rope_theta: float = ROPE_THETA,
                 norm_eps: float = NORM_EPS):
        super().__init__()
        if spec.family not in ("llama", "gpt2"):
            raise UsageError(f"model family {spec.family!r} is not built by bench train; llama and gpt2 are")
        if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
            raise UsageError(f"{spec.name}: hidden_size {spec.hidden_size} must divide into {spec.num_heads} heads "
                             f"and {spec.num_heads} heads into {spec.num_kv_heads} key/value heads")
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
        # the rotary tables once per step in the dtype q and k are computed in (bf16 under autocast)
        s, device = tokens.shape[1], tokens.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        cos, sin = self.rope_cos[:s].to(dtype), rolled_sin(self.rope_sin[:s]).to(dtype)
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
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
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
