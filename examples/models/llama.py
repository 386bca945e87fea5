"""A small Llama-style decoder (RMSNorm, rotary attention, SwiGLU, grouped-query attention) as a
`module:function` model: `topowise profile --model examples.models.llama:build --micro-batch 4 --seq-len 1024`.

Copy it and change the sizes, or return your own model the same way: build(micro_batch, seq_len)
returns (model, example_batch, loss_fn) with loss_fn(model, batch) -> the scalar loss.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.RMSNorm(dim)
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        q = rotate(q.view(b, t, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k = rotate(k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Llama(nn.Module):
    def __init__(self, vocab: int = 32000, dim: int = 1024, layers: int = 12, heads: int = 16, kv_heads: int = 4,
                 hidden: int = 2816, max_seq: int = 4096):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        cos, sin = self.cos[:t].to(torch.bfloat16), self.sin[:t].to(torch.bfloat16)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos.to(x.dtype), sin.to(x.dtype))
        return self.head(self.norm(x))


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def build(micro_batch: int = 4, seq_len: int = 1024, vocab: int = 32000, dim: int = 1024, layers: int = 12):
    model = Llama(vocab=vocab, dim=dim, layers=layers, max_seq=max(seq_len, 16))
    tokens = torch.randint(0, vocab, (micro_batch, seq_len + 1))
    return model, (tokens[:, :-1], tokens[:, 1:]), loss_fn


def build_tiny(micro_batch: int = 2, seq_len: int = 32):
    """A few hundred thousand parameters, for tests on the CPU."""
    return build(micro_batch, seq_len, vocab=256, dim=64, layers=2)
