"""ModelSpec: the shape of a decoder-only transformer, from a preset or a Hugging Face config.json.

The parameter count is exact for the families named here (Llama, Qwen2, Mistral: RMSNorm, SwiGLU,
grouped-query attention, rotary positions; GPT-2: LayerNorm, GELU MLP, learned positions, biases),
and equals the count of the transformer that `bench train` builds from the same spec.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from topowise.errors import UsageError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "llama" (also Qwen2, Mistral) or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tied_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has biases on q, k, v
    max_positions: int = 0  # learned position embeddings (GPT-2); 0 for rotary

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    # --- exact parameter counts ----------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size + self.max_positions * self.hidden_size

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if self.family == "gpt2":
            attn = h * 3 * h + 3 * h + h * h + h
            mlp = h * self.intermediate_size + self.intermediate_size + self.intermediate_size * h + h
            return attn + mlp + 4 * h  # two LayerNorms, weight and bias
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        return attn + mlp + 2 * h  # two RMSNorm weights

    @property
    def final_norm_params(self) -> int:
        return 2 * self.hidden_size if self.family == "gpt2" else self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        return (self.embedding_params + self.num_layers * self.layer_params + self.final_norm_params
                + self.lm_head_params)

    def to_dict(self) -> dict:
        return dict(asdict(self), params=self.params)

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        return cls(**{k: v for k, v in data.items() if k != "params"})  # params is derived


def _llama(name, vocab, hidden, layers, heads, kv, inter, tied, bias=False):
    return ModelSpec(name, "llama", vocab, hidden, layers, heads, kv, inter, tied, bias)


# Shapes from each model's published config.json; the count each gives is checked in tests.
PRESETS: dict[str, ModelSpec] = {
    "tiny": _llama("tiny", 512, 64, 2, 4, 2, 128, False),
    "gpt2": ModelSpec("gpt2", "gpt2", 50257, 768, 12, 12, 12, 3072, True, True, 1024),
    "qwen2.5-0.5b": _llama("qwen2.5-0.5b", 151936, 896, 24, 14, 2, 4864, True, True),
    "llama3.2-1b": _llama("llama3.2-1b", 128256, 2048, 16, 32, 8, 8192, True),
    "llama3.2-3b": _llama("llama3.2-3b", 128256, 3072, 28, 24, 8, 8192, True),
    "llama3.1-8b": _llama("llama3.1-8b", 128256, 4096, 32, 32, 8, 14336, False),
    "llama3.1-70b": _llama("llama3.1-70b", 128256, 8192, 80, 64, 8, 28672, False),
    "qwen2.5-7b": _llama("qwen2.5-7b", 152064, 3584, 28, 28, 4, 18944, False, True),
    "mistral-7b": _llama("mistral-7b", 32000, 4096, 32, 32, 8, 14336, False),
}


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name, or a path to a Hugging Face config.json (or a folder holding one)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UsageError(f"unknown model {name_or_path!r}: give a preset ({', '.join(PRESETS)}) "
                         "or a path to a Hugging Face config.json")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a Hugging Face config.json holds an object, not {type(config).__name__}")
    return spec_from_hf_config(config, name=path.parent.name or path.stem)


def spec_from_hf_config(config: dict, name: str = "custom") -> ModelSpec:
    """Llama, Qwen2 and Mistral field names (num_hidden_layers, ...) or GPT-2's (n_embd, n_layer, ...)."""
    model_type = str(config.get("model_type", "")).lower()
    try:
        if model_type == "gpt2" or "n_embd" in config:
            hidden = int(config["n_embd"])
            return ModelSpec(name, "gpt2", int(config["vocab_size"]), hidden, int(config["n_layer"]),
                             int(config["n_head"]), int(config["n_head"]),
                             int(config.get("n_inner") or 4 * hidden), True, True, int(config["n_positions"]))
        heads = int(config["num_attention_heads"])
        return ModelSpec(
            name, "llama", int(config["vocab_size"]), int(config["hidden_size"]), int(config["num_hidden_layers"]),
            heads, int(config.get("num_key_value_heads") or heads), int(config["intermediate_size"]),
            bool(config.get("tie_word_embeddings", False)),
            bool(config.get("attention_bias", model_type == "qwen2")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"config for {name!r} lacks a field topowise needs ({exc}); "
                         "Llama, Qwen2, Mistral and GPT-2 configs are understood") from None
