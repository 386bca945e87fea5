"""ModelSpec: the shape of a decoder-only transformer, from a preset or a Hugging Face config.json.

The parameter count is exact for the families named here (Llama, Qwen2, Qwen3, Mistral: RMSNorm, SwiGLU,
grouped-query attention, rotary positions; Qwen3 adds an RMSNorm over each query and key head; GPT-2:
LayerNorm, GELU MLP, learned positions, biases), and equals the count of the transformer that `bench train`
builds from the same spec. A config whose heads are not hidden_size / num_attention_heads wide says so in
its `head_dim` (Qwen3, Mistral NeMo, Gemma): q is then num_attention_heads x head_dim wide, not hidden_size.
Mixture-of-experts configs are refused: their parameters and FLOPs per token are not a dense block's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from topowise.errors import UsageError
from topowise.models.callable_spec import CallableSpec


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "llama" (also Qwen2, Qwen3, Mistral) or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tied_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has biases on q, k, v
    max_positions: int = 0  # learned position embeddings (GPT-2); 0 for rotary
    # tokens per sequence the model was published for (max_position_embeddings, GPT-2's n_positions);
    # 0: not stated. Learned positions stop there; rotary ones can be stretched (run.check_seq_len).
    context_length: int = 0
    # config.json's head_dim where it is not hidden_size / num_heads (Qwen3, Mistral NeMo); 0: it is
    attention_head_dim: int = 0
    qk_norm: bool = False  # Qwen3: an RMSNorm over each query and key head (head_dim weights each) before rotary
    # where the shape came from: "" for a preset (its name says it), else the config.json's resolved
    # path. Provenance, not shape: two specs of one shape compare equal wherever they were read from.
    source: str = field(default="", compare=False)

    @property
    def reference(self) -> str:
        """What load_model takes to read this spec again: the preset's name, or the config's path."""
        return self.source or self.name

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden_size // self.num_heads

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
        qk_norms = 2 * self.head_dim if self.qk_norm else 0
        return attn + mlp + 2 * h + qk_norms  # two RMSNorm weights

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
        """The shape, with `params`; `source`, `attention_head_dim` and `qk_norm` only where the model has
        them (a preset's dict, and a record's of a model without them, is as it was)."""
        data = dict(asdict(self), params=self.params)
        for key in ("source", "attention_head_dim", "qk_norm"):
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        if "callable" in data:  # a `module:function` model (CallableSpec) travels in the same records
            return CallableSpec.from_dict(data)  # type: ignore[return-value]
        return cls(**{k: v for k, v in data.items() if k != "params"})  # params is derived


def _llama(name, vocab, hidden, layers, heads, kv, inter, tied, bias=False, context=0):
    return ModelSpec(name, "llama", vocab, hidden, layers, heads, kv, inter, tied, bias, context_length=context)


# Shapes and context lengths (max_position_embeddings, GPT-2's n_positions) from each model's published
# config.json; the count each gives is checked in tests. tiny is made up; its context is the default
# --seq-len, so that a long sequence on it is warned of, then refused, like on the real models.
PRESETS: dict[str, ModelSpec] = {
    "tiny": _llama("tiny", 512, 64, 2, 4, 2, 128, False, context=4096),
    "gpt2": ModelSpec("gpt2", "gpt2", 50257, 768, 12, 12, 12, 3072, True, True, 1024, 1024),
    "qwen2.5-0.5b": _llama("qwen2.5-0.5b", 151936, 896, 24, 14, 2, 4864, True, True, 32768),
    "llama3.2-1b": _llama("llama3.2-1b", 128256, 2048, 16, 32, 8, 8192, True, context=131072),
    "llama3.2-3b": _llama("llama3.2-3b", 128256, 3072, 28, 24, 8, 8192, True, context=131072),
    "llama3.1-8b": _llama("llama3.1-8b", 128256, 4096, 32, 32, 8, 14336, False, context=131072),
    "llama3.1-70b": _llama("llama3.1-70b", 128256, 8192, 80, 64, 8, 28672, False, context=131072),
    "qwen2.5-7b": _llama("qwen2.5-7b", 152064, 3584, 28, 28, 4, 18944, False, True, 131072),
    "mistral-7b": _llama("mistral-7b", 32000, 4096, 32, 32, 8, 14336, False, context=32768),
}

# For the sizes tensor and pipeline parallelism are for (docs/parallelism.md). llama3.1-405b: the shape of
# meta-llama/Llama-3.1-405B's config.json. gpt3-175b: GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers,
# d_model 12288, 96 heads of 128, context 2048) as Megatron-LM trains it in Narayanan et al. SC'21 Table 1:
# a GPT-2-style block (learned positions, tied embedding, biases, 4h MLP), vocabulary padded to 51200.
PRESETS.update({
    "llama3.1-405b": _llama("llama3.1-405b", 128256, 16384, 126, 128, 8, 53248, False, context=131072),
    "gpt3-175b": ModelSpec("gpt3-175b", "gpt2", 51200, 12288, 96, 96, 96, 49152, True, True, 2048, 2048),
})


def load_model(name_or_path: str, wrap_class: str | None = None) -> ModelSpec:
    """A preset name, a path to a Hugging Face config.json (or a folder holding one), or a
    `module:function` returning (model, example batch[, loss_fn]) (topowise.models.callable: imports torch)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if is_callable_reference(name_or_path):
        from topowise.models.callable import describe_callable

        return describe_callable(name_or_path, wrap_class=wrap_class)  # type: ignore[return-value]
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"model folder {name_or_path!r} holds no config.json: give the folder of a Hugging "
                             "Face checkpoint (with its config.json), the config.json itself, or a preset")
        path = path / "config.json"
    if not path.is_file():
        raise UsageError(f"unknown model {name_or_path!r}: give a preset ({', '.join(PRESETS)}) "
                         "or a path to a Hugging Face config.json")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable JSON config ({exc})") from None
    except RecursionError:  # the parser recurses per level: nesting past ~1000 levels is not a config
        raise UsageError(f"{path}: not a Hugging Face config (JSON nested too deeply)") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a Hugging Face config.json holds an object, not {type(config).__name__}")
    spec = spec_from_hf_config(config, name=config_name(path), where=str(path))
    return replace(spec, source=str(path.resolve()))


def config_name(path: Path) -> str:
    """A config's display name: its folder's (llama-8b/config.json: llama-8b), with the file's stem
    where the file is not config.json, so that configs sharing a folder differ (models/gqa.json:
    models/gqa). Records keep the path as well (ModelSpec.source): two folders of one name differ there."""
    resolved = path.resolve()
    folder = resolved.parent.name
    if resolved.name == "config.json" and folder:
        return folder
    return f"{folder}/{resolved.stem}" if folder else resolved.stem


# model_type values read as what they are; any other is read as a Llama-style block, with a warning
UNDERSTOOD_TYPES = ("", "llama", "mistral", "qwen2", "qwen3", "gpt2")
# a field that makes a mixture-of-experts model (Mixtral; Qwen2/3-MoE and OLMoE; DeepSeek)
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")


def spec_from_hf_config(config: dict, name: str = "custom", where: str | None = None) -> ModelSpec:
    """Llama, Qwen2, Qwen3 and Mistral field names (num_hidden_layers, ...) or GPT-2's (n_embd, n_layer, ...).

    Every size must be a positive integer and the heads must divide: a negative hidden_size would
    otherwise predict negative parameters and MFU. Each refusal names the config's own field, and
    `where` (the file) or the model's name. A mixture-of-experts config is refused (its parameters are
    not all used by every token, which every term here assumes); a model_type outside UNDERSTOOD_TYPES
    is read as a Llama-style block and says so on stderr."""
    where = where or f"config for {name!r}"
    model_type = str(config.get("model_type", "")).lower()
    if "text_config" in config and "hidden_size" not in config:
        raise UsageError(f"{where}: a multimodal config (its text model is in text_config); topowise models the "
                         "text decoder alone: save text_config as a config.json of its own and give that")
    for key in EXPERT_FIELDS:
        experts = config.get(key)
        if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1:
            raise UsageError(f"{where}: {key} {experts}: a mixture-of-experts model; topowise models dense "
                             "transformers, whose every parameter works on every token")
    try:
        if model_type == "gpt2" or "n_embd" in config:
            hidden, heads = _size(where, config, "n_embd"), _size(where, config, "n_head")
            positions = _size(where, config, "n_positions")
            inner = _size(where, config, "n_inner") if config.get("n_inner") is not None else 4 * hidden
            _check_heads(where, ("n_embd", hidden), ("n_head", heads), None)
            return ModelSpec(name, "gpt2", _size(where, config, "vocab_size"), hidden, _size(where, config, "n_layer"),
                             heads, heads, inner, True, True, positions, positions)
        hidden, heads = _size(where, config, "hidden_size"), _size(where, config, "num_attention_heads")
        kv = _size(where, config, "num_key_value_heads") if config.get("num_key_value_heads") is not None else heads
        context = (_size(where, config, "max_position_embeddings")
                   if config.get("max_position_embeddings") is not None else 0)
        head_dim = _size(where, config, "head_dim") if config.get("head_dim") is not None else 0
        if head_dim * heads == hidden:
            head_dim = 0  # what hidden_size / num_attention_heads gives: nothing to record
        _check_heads(where, ("hidden_size", hidden) if not head_dim else None, ("num_attention_heads", heads),
                     ("num_key_value_heads", kv))
        if model_type not in UNDERSTOOD_TYPES:
            _warn_once(("model_type", model_type), f"{where}: model_type {model_type!r} is read as a Llama-style "
                       "block (RMSNorm, SwiGLU, rotary); whatever it does otherwise is not modelled")
        spec = ModelSpec(
            name, "llama", _size(where, config, "vocab_size"), hidden, _size(where, config, "num_hidden_layers"),
            heads, kv, _size(where, config, "intermediate_size"),
            bool(config.get("tie_word_embeddings", False)),
            bool(config.get("attention_bias", model_type == "qwen2")),
            context_length=context, attention_head_dim=head_dim, qk_norm=model_type == "qwen3",
        )
        warn_what_is_not_modelled(config, spec, model_type, where)
        return spec
    except KeyError as exc:
        raise UsageError(f"{where} lacks a field topowise needs ({exc}); "
                         "Llama, Qwen2, Qwen3, Mistral and GPT-2 configs are understood") from None


def warn_what_is_not_modelled(config: dict, spec: ModelSpec, model_type: str, where: str) -> None:
    """One line on stderr (once per config and kind) for what a Llama-style config asks that the spec leaves out:
    attention windowed to fewer tokens than the context (priced, and run by bench train, as full causal attention,
    so long where sequences pass the window), and biases the bench transformer does not build (Llama's
    attention_bias also puts one on o_proj; mlp_bias on gate, up and down)."""
    window = config.get("sliding_window")
    windowed = (isinstance(window, int) and not isinstance(window, bool) and window > 0
                and config.get("use_sliding_window", True) is not False
                and (not spec.context_length or window < spec.context_length))
    if windowed:
        _warn_once((where, "window"), f"{where}: sliding_window {window:,}: the model attends to the last "
                   f"{window:,} tokens only; topowise prices full causal attention, as bench train runs it, so the "
                   f"attention of sequences longer than {window:,} tokens is priced long")
    h, i = spec.hidden_size, spec.intermediate_size
    missing = []
    if config.get("attention_bias") and model_type != "qwen2":
        missing.append(("the o_proj bias", h))
    if config.get("mlp_bias"):
        missing.append(("the gate, up and down biases", 2 * i + h))
    if missing:
        count = spec.num_layers * sum(n for _, n in missing)
        _warn_once((where, "bias"), f"{where}: {' and '.join(w for w, _ in missing)} ({count:,} parameters, "
                   f"{100 * count / spec.params:.2f}% of the model) are not counted")


_warned: set[tuple[str, str]] = set()


def _warn_once(key: tuple[str, str], text: str) -> None:
    """One warning line on stderr, the first time `key` comes up in this process."""
    if key not in _warned:
        _warned.add(key)
        sys.stderr.write(f"topowise: warning: {text}\n")


# Ceilings on a config's sizes, far above every published dense model, so that a typo or a broken file is refused
# (vocab_size 1e15 would be predicted as a 10^18-parameter model): (ceiling, the largest published). Megatron-LM's
# 1T model: Narayanan et al. SC'21, Table 1.
_VOCAB = (2**22, "Gemma 3's ~262k tokens")  # 16x the largest vocabulary
_HIDDEN = (2**17, "Megatron-LM's 1T model's 25,600")  # 5x
_LAYERS = (2**12, "DeepNet's 1,000 (Wang et al. 2022, arXiv 2203.00555)")  # 4x
_HEADS = (2**12, "Megatron-LM's 1T model's 160")  # 25x
_INNER = (2**19, "Megatron-LM's 1T model's 102,400")  # 5x
_CONTEXT = (2**27, "Llama 4 Scout's 10M tokens")  # 12x
MAX_CONFIG_SIZES: dict[str, tuple[int, str]] = {
    "vocab_size": _VOCAB, "hidden_size": _HIDDEN, "n_embd": _HIDDEN, "num_hidden_layers": _LAYERS,
    "n_layer": _LAYERS, "num_attention_heads": _HEADS, "n_head": _HEADS, "num_key_value_heads": _HEADS,
    "head_dim": (2**12, "Gemma's 256"), "intermediate_size": _INNER, "n_inner": _INNER,
    "max_position_embeddings": _CONTEXT, "n_positions": _CONTEXT,
}


def _size(where: str, config: dict, key: str) -> int:
    """config[key] as a positive integer (4096 or 4096.0) within MAX_CONFIG_SIZES; anything else names the field."""
    value = config[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: {key} is {value!r}; it must be a positive integer")
    ceiling, largest = MAX_CONFIG_SIZES[key]
    if value > ceiling:
        raise UsageError(f"{where}: {key} is {value:,}; give at most {ceiling:,} (the largest published is "
                         f"{largest}; a size past it is a typo)")
    return value


def _check_heads(where: str, hidden: tuple[str, int] | None, heads: tuple[str, int], kv: tuple[str, int] | None
                 ) -> None:
    """Each head gets hidden / heads channels (unless the config gives head_dim: `hidden` None); each key/value
    head serves heads / kv query heads."""
    pairs = ((hidden, heads),) if hidden else ()
    for (big, a), (small, b) in (*pairs, *(((heads, kv),) if kv else ())):
        if a % b:
            raise UsageError(f"{where}: {big} {a} is not a multiple of {small} {b}")


def is_callable_reference(text: str) -> bool:
    """`package.module:function` (the torchrun/entry-point form), not a file or folder that exists."""
    module, sep, function = str(text).partition(":")
    return bool(sep and module and function) and not Path(text).exists() and "/" not in module
