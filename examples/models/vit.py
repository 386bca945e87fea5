"""A Vision Transformer (ViT-B/16 shape: 12 blocks of 768, 16 x 16 patches of a 224 x 224 image,
1000 classes; Dosovitskiy et al. 2020, arXiv 2010.11929) as a `module:function` model:
`topowise profile --model examples.models.vit:build --micro-batch 64 --seq-len 1`.

The batch is (images, labels); there is no sequence, so the function takes no seq_len and
topowise's "tokens" per step are micro-batch x --seq-len: give --seq-len 1 to read them as images.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, layers: int = 12, heads: int = 12,
                 mlp: int = 3072, classes: int = 1000):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patch = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1).to(x.dtype), x), dim=1) + self.pos.to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images).float(), labels)


def build(micro_batch: int = 64, image: int = 224, layers: int = 12, dim: int = 768, heads: int = 12):
    model = ViT(image=image, dim=dim, layers=layers, heads=heads, mlp=4 * dim)
    images = torch.randn(micro_batch, 3, image, image)
    labels = torch.randint(0, 1000, (micro_batch,))
    return model, (images, labels), loss_fn


def build_tiny(micro_batch: int = 4):
    """For tests on the CPU: 32 x 32 images, two blocks of 64."""
    return build(micro_batch, image=32, layers=2, dim=64, heads=4)
