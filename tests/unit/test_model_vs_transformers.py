"""The bench's transformer is Llama exactly: one config.json, the same weights, the same logits as
transformers' LlamaForCausalLM (GQA and tied-embedding configs, and heads given a head_dim other than
hidden_size / heads) and Qwen3ForCausalLM (its per-head q and k norms); tiny dimensions so the test is fast.

Tolerances: fp32, max |difference| of the logits <= 1e-5 x their largest magnitude: the same products,
but q.k adds each head's products in another order (our rotary layout is a permutation of theirs)
and the rotation is one complex product, so they agree to fp32 rounding (~1e-6 measured), not to the
bit; a wrong weight or rotation moves them by more than 1e-2. bf16 weights and
activations: each model's bf16 logits are some 3-7% (of the largest logit) from the fp32 ones with
these weights; ours must be no farther from the fp32 logits than 1.5x transformers' own bf16 error
(its RMSNorm rounds twice, F.rms_norm once, so the two bf16 results differ by a few bf16 steps).
"""

import json

import pytest

pytestmark = pytest.mark.reference  # imports a reference implementation (seconds): left out of the fast lane

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from topowise.models.spec import load_model  # noqa: E402
from topowise.models.transformer import Transformer, hf_rotary_permutation  # noqa: E402

BASE = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 301, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96, "hidden_act": "silu",
        "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False,
        "mlp_bias": False, "torch_dtype": "float32"}
CONFIGS = {
    "gqa": dict(BASE, num_key_value_heads=2, tie_word_embeddings=False),
    "tied": dict(BASE, num_key_value_heads=4, tie_word_embeddings=True, rope_theta=500000.0),
    # q 4 x 24 = 96 wide, from a hidden size of 64 (as Qwen3-0.6B's 16 x 128 from 1024)
    "head_dim": dict(BASE, num_key_value_heads=2, tie_word_embeddings=False, head_dim=24),
    "qwen3": dict(BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], num_key_value_heads=2,
                  tie_word_embeddings=True, head_dim=32, use_sliding_window=False),
}
HF_CLASSES = {"qwen3": ("Qwen3ForCausalLM", "Qwen3Config")}


def interleave_pairs(weight, head_dim: int):
    """A q or k projection's rows, head by head, in our rotary layout."""
    heads = weight.view(-1, head_dim, weight.shape[-1])
    return heads[:, hf_rotary_permutation(head_dim)].reshape(weight.shape)


def ours_from_hf(hf, spec, config: dict) -> Transformer:
    """Our model with the Hugging Face model's weights: q, k, v stacked into qkv, each q and k head's rows
    permuted from rotate-half pairs to interleaved ones (hf_rotary_permutation)."""
    model = Transformer(spec, config["max_position_embeddings"], rope_theta=config["rope_theta"],
                        norm_eps=config["rms_norm_eps"])
    sd = hf.state_dict()
    mine = {"embed.weight": sd["model.embed_tokens.weight"], "norm.weight": sd["model.norm.weight"]}
    if model.lm_head is not None:
        mine["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(spec.num_layers):
        hf_layer, layer = f"model.layers.{i}.", f"layers.{i}."
        mine[layer + "attn_norm.weight"] = sd[hf_layer + "input_layernorm.weight"]
        mine[layer + "mlp_norm.weight"] = sd[hf_layer + "post_attention_layernorm.weight"]
        q, k, v = (sd[hf_layer + f"self_attn.{p}_proj.weight"] for p in "qkv")
        mine[layer + "attn.qkv.weight"] = torch.cat([interleave_pairs(q, spec.head_dim),
                                                     interleave_pairs(k, spec.head_dim), v])
        mine[layer + "attn.out.weight"] = sd[hf_layer + "self_attn.o_proj.weight"]
        if spec.qk_norm:  # a per-channel weight: permuted as the q and k rows are
            for norm in ("q_norm", "k_norm"):
                mine[layer + f"attn.{norm}.weight"] = sd[hf_layer + f"self_attn.{norm}.weight"][
                    hf_rotary_permutation(spec.head_dim)]
        mine[layer + "mlp.gate.weight"] = sd[hf_layer + "mlp.gate_proj.weight"]
        mine[layer + "mlp.up.weight"] = sd[hf_layer + "mlp.up_proj.weight"]
        mine[layer + "mlp.down.weight"] = sd[hf_layer + "mlp.down_proj.weight"]
    model.load_state_dict(mine, strict=True)
    return model


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_equal_transformers_llama(name, tmp_path):
    config = CONFIGS[name]
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    spec = load_model(str(path))
    torch.manual_seed(0)
    model_class, config_class = HF_CLASSES.get(name, ("LlamaForCausalLM", "LlamaConfig"))
    hf = getattr(transformers, model_class)(getattr(transformers, config_class).from_pretrained(path.parent)).eval()
    with torch.no_grad():  # larger than the default init, so that every part moves the logits
        for p in hf.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    assert sum(p.numel() for p in hf.parameters()) == spec.params
    ours = ours_from_hf(hf, spec, config).eval()
    assert (ours.lm_head is None) == config["tie_word_embeddings"]
    tokens = torch.randint(0, config["vocab_size"], (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = hf(tokens).logits, ours(tokens)
        scale = want.abs().max()
        assert (got - want).abs().max() <= 1e-5 * scale
        hf_bf16 = hf.to(torch.bfloat16)(tokens).logits.float()
        ours_bf16 = ours.to(torch.bfloat16)(tokens).float()
    assert (ours_bf16 - want).abs().max() <= 1.5 * (hf_bf16 - want).abs().max()
