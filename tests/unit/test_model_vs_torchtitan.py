"""The bench transformer is torchtitan's Llama 3, given the same weights: the same rotary layout
(interleaved pairs, one complex product in fp32), so its weights load without a permutation: wq, wk, wv
stacked into qkv, w1 -> gate, w3 -> up, w2 -> down. torchtitan 0.2.2 on CPU, tiny dimensions.

torchtitan's package imports a Triton kernel for its mixture-of-experts models on the way to the Llama
class; CPU builds of torch have no Triton, so that one module is stood in for (the Llama model uses none
of it). Its Llama 3.1 RoPE scaling is set to a factor of 1: the plain Llama rotary, as the bench model's.

Tolerance: fp32, max |difference| of the logits <= 1e-5 x their largest magnitude (measured: 6e-7, fp32
rounding; gate and up swapped, the logits move by more than their largest magnitude).
"""

import sys
import types

import pytest

pytestmark = pytest.mark.reference  # imports a reference implementation (seconds): left out of the fast lane

torch = pytest.importorskip("torch")
try:
    import triton  # noqa: F401
except ImportError:  # the CPU build: the mixture-of-experts kernel module is stood in for
    _stub = types.ModuleType("torchtitan.models.moe.kernels")
    _stub.generate_permute_indices = None
    sys.modules.setdefault("torchtitan.models.moe.kernels", _stub)
pytest.importorskip("torchtitan")

from topowise.models.spec import spec_from_hf_config  # noqa: E402
from topowise.models.transformer import Transformer  # noqa: E402

SHAPES = {  # name -> (dim, layers, heads, kv heads, vocab)
    "gqa": (64, 2, 4, 2, 301),
    "mha": (96, 3, 6, 6, 257),
}


def torchtitan_llama(dim: int, layers: int, heads: int, kv: int, vocab: int, seq: int, theta: float):
    from torchtitan.models.llama3.model.args import RoPEScalingArgs, TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer as TitanTransformer

    hidden = 32 * -(-int(8 * dim / 3) // 32)  # multiple_of 32: torchtitan's FeedForward width
    args = TransformerModelArgs(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv, vocab_size=vocab,
                                multiple_of=32, ffn_dim_multiplier=None, norm_eps=1e-5, rope_theta=theta,
                                rope_scaling_args=RoPEScalingArgs(scaling_factor=1.0), max_seq_len=seq,
                                attn_type="sdpa")
    model = TitanTransformer(args)
    with torch.no_grad():
        model.init_weights()
        for p in model.parameters():  # larger than the default init, so that every part moves the logits
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    return model, hidden


def ours_from_torchtitan(titan, spec, seq: int, theta: float) -> Transformer:
    model = Transformer(spec, seq, rope_theta=theta)
    sd = titan.state_dict()
    mine = {"embed.weight": sd["tok_embeddings.weight"], "norm.weight": sd["norm.weight"],
            "lm_head.weight": sd["output.weight"]}
    for i in range(spec.num_layers):
        t, o = f"layers.{i}.", f"layers.{i}."
        mine[o + "attn_norm.weight"] = sd[t + "attention_norm.weight"]
        mine[o + "mlp_norm.weight"] = sd[t + "ffn_norm.weight"]
        mine[o + "attn.qkv.weight"] = torch.cat([sd[t + f"attention.w{p}.weight"] for p in "qkv"])
        mine[o + "attn.out.weight"] = sd[t + "attention.wo.weight"]
        mine[o + "mlp.gate.weight"] = sd[t + "feed_forward.w1.weight"]
        mine[o + "mlp.up.weight"] = sd[t + "feed_forward.w3.weight"]
        mine[o + "mlp.down.weight"] = sd[t + "feed_forward.w2.weight"]
    model.load_state_dict(mine, strict=True)
    return model


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_logits_equal_torchtitan_llama3(name):
    dim, layers, heads, kv, vocab = SHAPES[name]
    seq, theta = 48, 500000.0
    torch.manual_seed(0)
    titan, hidden = torchtitan_llama(dim, layers, heads, kv, vocab, seq, theta)
    spec = spec_from_hf_config({"model_type": "llama", "hidden_size": dim, "num_hidden_layers": layers,
                                "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": hidden,
                                "vocab_size": vocab, "tie_word_embeddings": False}, name=f"titan-{name}")
    assert sum(p.numel() for p in titan.parameters()) == spec.params
    ours = ours_from_torchtitan(titan, spec, seq, theta).eval()
    tokens = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = titan.eval()(tokens), ours(tokens)
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
