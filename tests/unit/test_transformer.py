import pytest

torch = pytest.importorskip("torch")

from topowise.errors import UsageError  # noqa: E402
from topowise.models.spec import PRESETS, ModelSpec  # noqa: E402
from topowise.models.transformer import Transformer, build_model, rotary_tables  # noqa: E402


@pytest.mark.parametrize("name", ["tiny", "gpt2", "qwen2.5-0.5b", "llama3.2-1b", "llama3.1-8b", "qwen2.5-7b",
                                  "mistral-7b", "llama3.1-70b"])
def test_parameter_count_equals_spec(name):
    spec = PRESETS[name]
    with torch.device("meta"):
        model = Transformer(spec, max_seq_len=128)
    assert sum(p.numel() for p in model.parameters()) == spec.params


def test_tied_and_untied_output_and_qkv_bias():
    with torch.device("meta"):
        tied = Transformer(PRESETS["llama3.2-1b"], 16)
        untied = Transformer(PRESETS["llama3.1-8b"], 16)
        qwen = Transformer(PRESETS["qwen2.5-0.5b"], 16)
    assert tied.lm_head is None and untied.lm_head is not None
    assert qwen.layers[0].attn.qkv.bias is not None and tied.layers[0].attn.qkv.bias is None


def test_init_is_deterministic_and_seeded():
    a = build_model(PRESETS["tiny"], 32, "cpu", seed=1)
    b = build_model(PRESETS["tiny"], 32, "cpu", seed=1)
    c = build_model(PRESETS["tiny"], 32, "cpu", seed=2)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
        if p.ndim > 1:
            assert not torch.equal(p, r), name
    assert torch.equal(a.layers[0].attn_norm.weight, torch.ones(64))
    assert torch.allclose(a.rope_cos, rotary_tables(32, 16)[0])  # buffers filled after to_empty


@pytest.mark.parametrize("name", ["tiny", "gpt2-small"])
def test_causal_and_shapes(name):
    spec = PRESETS["tiny"] if name == "tiny" else ModelSpec("g", "gpt2", 300, 64, 2, 4, 4, 256, True, True, 64)
    model = build_model(spec, 32, "cpu", seed=0)
    x = torch.randint(0, spec.vocab_size, (2, 20))
    y = x.clone()
    y[:, 12:] = (y[:, 12:] + 1) % spec.vocab_size
    with torch.no_grad():
        lx, ly = model(x), model(y)
    assert lx.shape == (2, 20, spec.vocab_size)
    assert torch.allclose(lx[:, :12], ly[:, :12], atol=1e-5)  # the future does not leak back
    assert not torch.allclose(lx[:, 12:], ly[:, 12:])


def turned_pairs(x, cos, sin):
    """Rotary embedding written out: pair i of each head, (x[2i], x[2i+1]), turned by the angle of cos, sin."""
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def test_grouped_query_matches_full_heads_with_shared_kv():
    """GQA with kv heads repeated equals attention where each query head gets its group's k and v."""
    spec = PRESETS["tiny"]  # 4 heads, 2 kv heads, head_dim 16
    model = build_model(spec, 16, "cpu", seed=0)
    attn = model.layers[0].attn
    x = torch.randn(1, 8, 64)
    cos, sin = model.rope_cos, model.rope_sin
    with torch.no_grad():
        out = attn(x, cos, sin)
        q, k, v = attn.qkv(x).split([64, 32, 32], dim=-1)
        q = q.view(1, 8, 4, 16).transpose(1, 2)
        k = k.view(1, 8, 2, 16).transpose(1, 2)
        v = v.view(1, 8, 2, 16).transpose(1, 2)
        q, k = turned_pairs(q, cos[:8], sin[:8]), turned_pairs(k, cos[:8], sin[:8])
        heads = []
        for h in range(4):
            scores = (q[:, h] @ k[:, h // 2].transpose(-1, -2)) / 4.0
            scores = scores.masked_fill(torch.triu(torch.ones(8, 8, dtype=torch.bool), 1), float("-inf"))
            heads.append(scores.softmax(-1) @ v[:, h // 2])
        ref = attn.out(torch.stack(heads, 1).transpose(1, 2).reshape(1, 8, 64))
    assert torch.allclose(out, ref, atol=1e-5)


def test_gpt2_positions_limit():
    with pytest.raises(UsageError, match="1024 learned positions"):
        with torch.device("meta"):
            Transformer(PRESETS["gpt2"], 2048)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_complex_and_real_agree_with_the_pairs_written_out(dtype):
    """Eager's complex rotation and compile's real one are the same map, in fp32 whatever x's dtype."""
    from topowise.models.transformer import rotate_complex, rotate_real

    cos, sin = rotary_tables(12, 16, theta=10000.0)
    x = torch.randn(2, 12, 3, 16).to(dtype)  # (batch, seq, heads, head_dim)
    cos, sin = cos[:, None], sin[:, None]
    want = turned_pairs(x.float(), cos, sin).to(dtype)
    assert torch.equal(rotate_real(x, cos, sin), want)
    got = rotate_complex(x, torch.complex(cos, sin))
    assert got.dtype == dtype and torch.allclose(got.float(), want.float(), rtol=0, atol=1e-6 if dtype == torch.float32
                                                 else 0.0079)  # one bf16 step at |x| < 4


def test_hf_permutation_turns_rotate_half_into_pairs():
    """Hugging Face's rotate-half rotation of a head equals ours of the permuted head, permuted."""
    from topowise.models.transformer import hf_rotary_permutation, rotate_real

    cos, sin = rotary_tables(6, 8)
    x = torch.randn(6, 8, dtype=torch.float64)
    half = torch.cat((-x[:, 4:], x[:, :4]), dim=-1)
    hf = x * torch.cat((cos, cos), -1).double() + half * torch.cat((sin, sin), -1).double()
    perm = hf_rotary_permutation(8)
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert torch.allclose(rotate_real(x[:, perm], cos.double(), sin.double()), hf[:, perm], atol=1e-12)
