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


def test_grouped_query_matches_full_heads_with_shared_kv():
    """GQA with kv heads repeated equals attention where each query head gets its group's k and v."""
    spec = PRESETS["tiny"]  # 4 heads, 2 kv heads, head_dim 16
    model = build_model(spec, 16, "cpu", seed=0)
    attn = model.layers[0].attn
    x = torch.randn(1, 8, 64)
    cos, sin = model.rope_cos, model.rope_sin
    with torch.no_grad():
        from topowise.models.transformer import rolled_sin

        out = attn(x, cos, rolled_sin(sin))  # the blocks take sin rolled, rotate-half's sign folded in
        q, k, v = attn.qkv(x).split([64, 32, 32], dim=-1)
        q = q.view(1, 8, 4, 16).transpose(1, 2)
        k = k.view(1, 8, 2, 16).transpose(1, 2)
        v = v.view(1, 8, 2, 16).transpose(1, 2)
        from topowise.models.transformer import _rotate

        q, k = _rotate(q, cos[:8], sin[:8]), _rotate(k, cos[:8], sin[:8])
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
