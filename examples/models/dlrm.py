"""A DLRM-style recommendation model (Naumov et al. 2019, arXiv 1906.00091): dense features through a
bottom MLP, sparse features through large embedding tables (nn.EmbeddingBag, summed over a few ids
per table), pairwise dot-product interaction, a top MLP, a click/no-click logit. Few FLOPs, many
parameters: the embedding tables are nearly all of them. As a `module:function` model:
`topowise profile --model examples.models.dlrm:build --micro-batch 4096 --seq-len 1`.

The tables are dense (sparse=False): their gradients are ordinary tensors that DDP all-reduces and
FSDP reduce-scatters, and AdamW updates every row. The function takes no seq_len.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(sizes: list[int], last_relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense: int = 13, tables: int = 8, rows: int = 500_000, dim: int = 128,
                 bottom: tuple[int, ...] = (512, 256), top: tuple[int, ...] = (1024, 1024, 512, 256)):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = mlp([dense, *bottom, dim])
        pairs = (tables + 1) * tables // 2
        self.top = mlp([dim + pairs, *top, 1], last_relu=False)
        self.tables = tables

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)  # (B, dim)
        feats = torch.stack([x] + [emb(sparse[:, t]) for t, emb in enumerate(self.embeddings)], dim=1)
        dots = torch.bmm(feats, feats.transpose(1, 2))  # (B, T+1, T+1)
        i, j = torch.triu_indices(self.tables + 1, self.tables + 1, offset=1, device=dots.device)
        return self.top(torch.cat((x, dots[:, i, j]), dim=1)).squeeze(1)


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    dense, sparse, clicks = batch
    return F.binary_cross_entropy_with_logits(model(dense, sparse).float(), clicks)


def build(micro_batch: int = 4096, tables: int = 8, rows: int = 500_000, dim: int = 128, ids_per_table: int = 4):
    model = DLRM(tables=tables, rows=rows, dim=dim)
    dense = torch.randn(micro_batch, 13)
    sparse = torch.randint(0, rows, (micro_batch, tables, ids_per_table))
    clicks = torch.randint(0, 2, (micro_batch,)).float()
    return model, (dense, sparse, clicks), loss_fn


def build_tiny(micro_batch: int = 16):
    """For tests on the CPU: four tables of 1000 rows."""
    return build(micro_batch, tables=4, rows=1000, dim=16, ids_per_table=2)
