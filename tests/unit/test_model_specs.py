"""Model specs: parameter counts against the published ones, Hugging Face configs, unknown names."""

import json

import pytest

from topowise.errors import UsageError
from topowise.models.spec import PRESETS, ModelSpec, load_model, spec_from_hf_config

# Published parameter counts (each model card / config on the Hugging Face hub).
PUBLISHED = {
    "gpt2": 124_439_808,
    "qwen2.5-0.5b": 494_032_768,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "qwen2.5-7b": 7_615_616_512,
    "mistral-7b": 7_241_732_096,
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_counts_match_published(name):
    assert PRESETS[name].params == PUBLISHED[name]


def test_hf_config_llama_matches_preset(tmp_path):
    cfg = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
           "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path)).params == PUBLISHED["llama3.2-1b"]


def test_hf_config_gpt2_and_qwen_bias():
    gpt2 = spec_from_hf_config({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                                "n_head": 12, "n_positions": 1024})
    assert gpt2.params == PUBLISHED["gpt2"]
    qwen = spec_from_hf_config({"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                                "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                                "intermediate_size": 18944, "tie_word_embeddings": False})
    assert qwen.params == PUBLISHED["qwen2.5-7b"]


def test_unknown_model_is_usage_error():
    with pytest.raises(UsageError, match="unknown model"):
        load_model("no-such-model")


# --- where a config came from: a name that tells configs apart, and the path ---------------------------
TINY_LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 1024, "num_hidden_layers": 8,
              "num_attention_heads": 16, "intermediate_size": 2816, "max_position_embeddings": 4096}


def test_configs_in_one_folder_get_names_that_differ_and_keep_their_path(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "gqa.json").write_text(json.dumps(dict(TINY_LLAMA, num_key_value_heads=4)))
    (folder / "mha.json").write_text(json.dumps(TINY_LLAMA))
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    gqa, mha = load_model(str(folder / "gqa.json")), load_model(str(folder / "mha.json"))
    assert (gqa.name, mha.name) == ("models/gqa", "models/mha")
    assert load_model(str(folder)).name == load_model(str(folder / "config.json")).name == "models"
    assert gqa.source == str((folder / "gqa.json").resolve()) and gqa.reference == gqa.source
    assert load_model(gqa.reference) == gqa  # the reference reads the same spec again
    assert (gqa.num_kv_heads, mha.num_kv_heads) == (4, 16) and gqa.params < mha.params
    # the shape travels with its source, and reads back whole
    assert ModelSpec.from_dict(json.loads(json.dumps(gqa.to_dict()))).source == gqa.source


def test_a_preset_has_no_source_and_its_dict_is_unchanged():
    spec = PRESETS["llama3.2-1b"]
    assert spec.source == "" and spec.reference == "llama3.2-1b"
    assert "source" not in spec.to_dict()
    assert ModelSpec.from_dict(spec.to_dict()) == spec  # and a dict without `source` (older ones) loads


# --- heads wider or narrower than hidden_size / heads; Qwen3's q/k norms; mixture-of-experts refused ---------
def test_qwen3_config_counts_as_published():
    """Qwen3-0.6B (head_dim 128 from a hidden size of 1024 over 16 heads; q and k norms): transformers'
    Qwen3ForCausalLM holds 596,049,920 parameters for this config (tests/data/configs/qwen3-0.6b.json)."""
    spec = load_model("tests/data/configs/qwen3-0.6b.json")
    assert (spec.head_dim, spec.attention_head_dim, spec.qk_norm) == (128, 128, True)
    assert spec.params == 596_049_920
    assert ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_head_dim_other_than_hidden_over_heads():
    """Mistral NeMo 12B: 32 heads of 128 from a hidden size of 5120 (transformers' MistralForCausalLM:
    12,247,782,400 parameters). Without head_dim the heads would be 160 wide and the count 12.77B."""
    nemo = {"model_type": "mistral", "vocab_size": 131072, "hidden_size": 5120, "num_hidden_layers": 40,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "head_dim": 128}
    spec = spec_from_hf_config(nemo)
    assert spec.head_dim == 128 and not spec.qk_norm and spec.params == 12_247_782_400
    assert spec_from_hf_config({k: v for k, v in nemo.items() if k != "head_dim"}).params == 12_772_070_400
    # a head_dim that hidden_size / heads gives anyway is no change: the same spec, the same record
    plain = dict(TINY_LLAMA, head_dim=64)
    assert spec_from_hf_config(plain) == spec_from_hf_config(TINY_LLAMA)
    assert "attention_head_dim" not in spec_from_hf_config(plain).to_dict()
    # hidden_size need not divide by the heads when head_dim says how wide they are
    assert spec_from_hf_config(dict(TINY_LLAMA, hidden_size=1000, head_dim=64)).head_dim == 64
    with pytest.raises(UsageError, match="hidden_size 1000 is not a multiple of num_attention_heads 16"):
        spec_from_hf_config(dict(TINY_LLAMA, hidden_size=1000))


@pytest.mark.parametrize("field", ["num_local_experts", "num_experts", "n_routed_experts"])
def test_mixture_of_experts_is_refused(field):
    with pytest.raises(UsageError, match=f"{field} 8: a mixture-of-experts model"):
        spec_from_hf_config(dict(TINY_LLAMA, **{field: 8, "num_experts_per_tok": 2}))
    assert spec_from_hf_config(dict(TINY_LLAMA, **{field: None})) == spec_from_hf_config(TINY_LLAMA)


def test_an_unknown_model_type_is_read_as_llama_and_said_once(capsys):
    first = spec_from_hf_config(dict(TINY_LLAMA, model_type="olmo2-test"))
    spec_from_hf_config(dict(TINY_LLAMA, model_type="olmo2-test"))
    assert first.family == "llama"
    assert capsys.readouterr().err.count("model_type 'olmo2-test' is read as a Llama-style block") == 1
    spec_from_hf_config(dict(TINY_LLAMA, model_type="qwen3"))
    assert capsys.readouterr().err == ""


def test_a_multimodal_config_says_where_its_text_model_is():
    with pytest.raises(UsageError, match="a multimodal config .* text_config"):
        spec_from_hf_config({"model_type": "mllama", "text_config": TINY_LLAMA, "vision_config": {}})


def test_a_sliding_window_shorter_than_the_context_is_said(capsys):
    """Mistral 7B v0.1 attends to the last 4096 of 32768 positions; Qwen2's configs name a window and switch it off."""
    spec_from_hf_config(dict(TINY_LLAMA, model_type="mistral", max_position_embeddings=32768, sliding_window=4096),
                        where="mistral-v0.1/config.json")
    err = capsys.readouterr().err
    assert "mistral-v0.1/config.json: sliding_window 4,096" in err and "priced long" in err
    for quiet in ({"sliding_window": 32768, "use_sliding_window": False, "max_position_embeddings": 32768},
                  {"sliding_window": None}, {"sliding_window": 4096, "max_position_embeddings": 4096}):
        spec_from_hf_config(dict(TINY_LLAMA, **quiet), where=f"quiet {quiet}")
    assert capsys.readouterr().err == ""


def test_biases_the_spec_does_not_count_are_said_with_their_count(capsys):
    spec = spec_from_hf_config(dict(TINY_LLAMA, mlp_bias=True, attention_bias=True), where="biased/config.json")
    h, i, layers = spec.hidden_size, spec.intermediate_size, spec.num_layers
    err = capsys.readouterr().err
    assert spec.qkv_bias  # q, k and v's are counted
    assert f"the o_proj bias and the gate, up and down biases ({layers * (h + 2 * i + h):,} parameters" in err
    spec_from_hf_config(dict(TINY_LLAMA, model_type="qwen2"), where="qwen2/config.json")  # q, k, v biases only
    spec_from_hf_config(dict(TINY_LLAMA, attention_bias=False, mlp_bias=False), where="plain/config.json")
    assert capsys.readouterr().err == ""
