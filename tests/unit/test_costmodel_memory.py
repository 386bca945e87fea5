import pytest
from hypothesis import given, settings, strategies as st

from topowise.costmodel.memory import (activation_bytes_per_token_per_layer, head_bytes_per_token,
                                       logits_bytes_per_token, model_state_bytes, pytorch_state_bytes, rope_bytes)
from topowise.costmodel.profile import default_profile
from topowise.costmodel.step import predict
from topowise.models.spec import ModelSpec, load_model
from topowise.topology.presets import load_preset

GB = 1e9


@pytest.mark.parametrize("strategy,expected_gb", [("ddp", 120), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)])
def test_zero_paper_example(strategy, expected_gb):
    # Rajbhandari et al. 2020, figure 1: 7.5B parameters, 64 GPUs, K = 12
    assert model_state_bytes(7.5e9, strategy, 64) / GB == pytest.approx(expected_gb, abs=0.05)


@given(params=st.floats(1e6, 1e12), n=st.integers(1, 1024))
def test_model_states_never_rise_with_more_sharding(params, n):
    for states in (lambda s: model_state_bytes(params, s, n), lambda s: sum(pytorch_state_bytes(params, s, n).values())):
        values = [states(s) for s in ("ddp", "zero1", "zero2", "zero3")]
        assert all(a >= b * (1 - 1e-12) for a, b in zip(values, values[1:]))


def test_pytorch_layout_zero1_keeps_fp32_params_and_grads():
    # ZeroRedundancyOptimizer over DDP: 4 + 4 bytes unsharded, 8 bytes of AdamW state sharded
    assert sum(pytorch_state_bytes(1000, "zero1", 4).values()) == 4000 + 4000 + 8000 / 4


def test_activation_bytes_worked_llama_1b():
    m = load_model("llama3.2-1b")  # h 2048, I 8192, 32 heads x 64 (q = 2048)
    h, i, q = 2048, 8192, 2048
    bf16 = 2 * (2 * h + 4) + 2 * 2 * h + 8 * q + 4 * 32 + 8 * i
    assert activation_bytes_per_token_per_layer(m, autocast=False) == bf16 == 98440
    # autocast: the residual stream and the norms' inputs are fp32
    assert activation_bytes_per_token_per_layer(m, autocast=True) == bf16 + 2 * 2 * h
    # SDPA(enable_gqa=True) would keep k and v at 8 heads: 2 x 2 x (2048 - 512) bytes fewer
    assert activation_bytes_per_token_per_layer(m, gqa_expanded=False) == bf16 - 4 * (q - 512)


def test_logits_dominate_for_big_vocab():
    m = load_model("llama3.2-1b")
    assert logits_bytes_per_token(m) == 12 * 128256


def test_activations_match_what_autograd_saves():
    """Count the storages autograd saves in the bench's transformer on CPU; CUDA's fused rms_norm is
    emulated (CPU decomposes rms_norm and saves more)."""
    torch = pytest.importorskip("torch")

    from topowise.models import transformer

    class FusedRmsNorm(torch.autograd.Function):  # saves input and rstd, as _fused_rms_norm on CUDA
        @staticmethod
        def forward(ctx, x, weight, eps):
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            ctx.save_for_backward(x, rstd)
            return (x.float() * rstd).to(x.dtype) * weight.to(x.dtype)

        @staticmethod
        def backward(ctx, grad):
            return None, None, None

    def rms_norm(x, shape, weight, eps):
        x = x.float() if torch.is_autocast_enabled("cpu") else x  # autocast's fp32 list
        return FusedRmsNorm.apply(x, weight.to(x.dtype) if x.dtype != weight.dtype else weight, eps)

    spec = ModelSpec("t", "llama", 1000, 256, 2, 8, 2, 512, True)
    b, s = 2, 64
    for autocast in (True, False):
        model = transformer.build_model(spec, s, "cpu", 0)
        if not autocast:
            model = model.to(torch.bfloat16)
        keep = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
        saved: dict = {}

        def pack(t):
            saved.setdefault(t.untyped_storage().data_ptr(), (t.untyped_storage().nbytes(), type(t.grad_fn).__name__))
            return t

        original = transformer.F.rms_norm
        transformer.F.rms_norm = rms_norm
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    model(torch.randint(0, 1000, (b, s)))
        finally:
            transformer.F.rms_norm = original
        fresh = {ptr: v for ptr, v in saved.items() if ptr not in keep}
        # autocast's bf16 weight copies are saved as their transpose: a buffer term, not activations
        copies = sum(n for n, fn in fresh.values() if fn == "TBackward0")
        acts = sum(n for n, fn in fresh.values()) - copies
        assert (copies > 0) == autocast
        predicted = (b * s * (spec.num_layers * activation_bytes_per_token_per_layer(spec, autocast)
                              + head_bytes_per_token(spec, autocast) - 8)  # targets are not in forward
                     + rope_bytes(spec, s))
        assert acts == pytest.approx(predicted, rel=0.01), autocast


def test_memory_phases_and_fits_on_h200():
    m = load_model("llama3.2-1b")
    topo = load_preset("h200-x2")
    p = predict(m, topo, (0, 1), "zero3")
    mem = p.memory
    parts = (mem.params_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.activations_bytes + mem.logits_bytes
             + mem.buffers_bytes)
    assert parts == pytest.approx(mem.allocated_bytes, abs=8)
    assert mem.peak_bytes == pytest.approx(mem.allocated_bytes * 1.05 + 500 * 2**20, abs=8)
    assert p.fits
    big = predict(load_model("llama3.1-70b"), topo, (0, 1), "ddp")
    assert not big.fits  # 16 bytes x 70.6B parameters is 1.1 TB


def test_checkpointing_lowers_memory_and_zero3_shards_params():
    m = load_model("llama3.1-8b")
    topo = load_preset("hgx-h100-8")
    plain = predict(m, topo, tuple(range(8)), "zero3")
    ckpt = predict(m, topo, tuple(range(8)), "zero3", activation_checkpointing=True)
    assert ckpt.memory.peak_bytes < plain.memory.peak_bytes
    assert plain.memory.params_bytes == pytest.approx(4 * m.params / 8, abs=1)
    ddp = predict(m, topo, tuple(range(8)), "ddp")
    assert ddp.memory.params_bytes == 4 * m.params
    assert "autocast bf16 weight copies" in ddp.memory.buffers


@settings(max_examples=30, deadline=None)
@given(mb=st.integers(1, 8), seq=st.sampled_from([512, 1024, 4096]), ac=st.booleans(), n=st.sampled_from([2, 4, 8]))
def test_peak_never_rises_ddp_to_zero3(mb, seq, ac, n):
    m = load_model("llama3.2-1b")
    topo = load_preset("hgx-h200-8")
    peaks = [predict(m, topo, tuple(range(n)), s, micro_batch=mb, seq_len=seq, activation_checkpointing=ac)
             .memory.peak_bytes for s in ("ddp", "zero1", "zero3")]
    assert peaks[0] >= peaks[1] >= peaks[2]


def test_default_profile_headroom():
    assert 0 < default_profile().memory_headroom < 0.5


@pytest.mark.parametrize("strategy,extra", [("ddp", True), ("zero1", True), ("zero2", False), ("zero3", False)])
def test_ddp_bucket_rebuild_counts_in_the_peak_not_the_steady_step(strategy, extra):
    model = load_model("llama3.2-1b")
    m = predict(model, load_preset("h200-x2"), (0, 1), strategy, seq_len=8192).memory
    assert m.first_steps_extra_bytes == (4 * model.params if extra else 0)
    assert m.peak_bytes == m.allocated_bytes + m.overhead_bytes + m.first_steps_extra_bytes
