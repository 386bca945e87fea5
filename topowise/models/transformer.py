"""The decoder-only transformer that `bench train` runs, built from a ModelSpec.

Llama family (also Qwen2, Mistral): RMSNorm (F.rms_norm), rotary attention through
F.scaled_dot_product_attention(is_causal=True) (the flash kernel on CUDA in bf16), SwiGLU MLP,
grouped-query attention, q/k/v biases when `spec.qkv_bias`, the output projection tied to the
embedding when `spec.tied_embeddings`. GPT-2 family: LayerNorm, GELU MLP, learned positions, biases.
The parameter count equals `spec.params` exactly (tested on the presets, built on the meta device).

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


def rotary_tables(seq_len: int, head_dim: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (seq_len, head_dim) in the Hugging Face "rotate half" layout."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, NORM_EPS)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, rotary: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        bias = spec.qkv_bias
        self.qkv = nn.Linear(spec.hidden_size, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=bias)
        self.out = nn.Linear(self.heads * self.head_dim, spec.hidden_size, bias=spec.family == "gpt2")
        self.rotary = rotary

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.rotary:
            cos, sin = cos[:s].to(q.dtype), sin[:s].to(q.dtype)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.kv_heads != self.heads:  # grouped-query: each k/v head serves heads/kv_heads query heads
            repeat = self.heads // self.kv_heads
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate_up = nn.Linear(spec.hidden_size, 2 * spec.intermediate_size, bias=False)
        self.down = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class GeluMlp(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.up = nn.Linear(spec.hidden_size, spec.intermediate_size)
        self.down = nn.Linear(spec.intermediate_size, spec.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    """One pre-norm transformer layer: the unit that FSDP shards and activation checkpointing wraps."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        llama = spec.family != "gpt2"
        norm = (lambda: RMSNorm(spec.hidden_size)) if llama else (lambda: nn.LayerNorm(spec.hidden_size))
        self.attn_norm, self.mlp_norm = norm(), norm()
        self.attn = Attention(spec, rotary=llama)
        self.mlp = SwiGLU(spec) if llama else GeluMlp(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, max_seq_len: int = 4096):
        super().__init__()
        if spec.family not in ("llama", "gpt2"):
            raise UsageError(f"model family {spec.family!r} is not built by bench train; llama and gpt2 are")
        if spec.hidden_size % spec.num_heads or spec.num_heads % spec.num_kv_heads:
            raise UsageError(f"{spec.name}: hidden_size {spec.hidden_size} must divide into {spec.num_heads} heads "
                             f"and {spec.num_heads} heads into {spec.num_kv_heads} key/value heads")
        if spec.max_positions and max_seq_len > spec.max_positions:
            raise UsageError(f"{spec.name} has {spec.max_positions} learned positions: use --seq-len "
                             f"{spec.max_positions} or less, not {max_seq_len}")
        self.spec, self.max_seq_len = spec, max_seq_len
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.positions = nn.Embedding(spec.max_positions, spec.hidden_size) if spec.max_positions else None
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size) if spec.family != "gpt2" else nn.LayerNorm(spec.hidden_size)
        self.lm_head = None if spec.tied_embeddings else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        # Rotary tables are buffers (not parameters): recomputed by init_weights after materialising.
        cos, sin = rotary_tables(max_seq_len, spec.head_dim, device=self.embed.weight.device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        if self.positions is not None:
            x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
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
        cos, sin = rotary_tables(self.max_seq_len, self.spec.head_dim, device=self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)


def build_model(spec: ModelSpec, max_seq_len: int, device: str, seed: int) -> Transformer:
    """Build on the meta device (no memory), materialise on `device`, initialise from `seed`."""
    with torch.device("meta"):
        model = Transformer(spec, max_seq_len)
    model.to_empty(device=device)
    model.init_weights(seed)
    return model
