"""Model specs: parameter counts against the published ones, Hugging Face configs, unknown names."""

import json

import pytest

from topowise.errors import UsageError
from topowise.models.spec import PRESETS, load_model, spec_from_hf_config

# Published parameter counts (each model card / config on the Hugging Face hub).
PUBLISHED = {
    "gpt2": 124_439_808,
    "qwen2.5-0.5b": 494_032_768,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
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
