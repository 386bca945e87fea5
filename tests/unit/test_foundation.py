
import pytest

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.models.spec import PRESETS, load_model, spec_from_hf_config
from topowise.topology.model import Topology, parse_gpu_list
from topowise.topology.presets import load_preset, preset_names

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
    (tmp_path / "config.json").write_text(__import__("json").dumps(cfg))
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


@pytest.mark.parametrize("name", preset_names())
def test_presets_round_trip_json(name):
    topo = load_preset(name)
    again = Topology.from_dict(topo.to_dict())
    assert again.to_dict() == topo.to_dict()


def test_nvl_islands_and_best_pair():
    nvl = load_preset("h100-nvl-8")
    assert nvl.islands() == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert nvl.best_subset(2) in nvl.islands()
    # spanning two bridged pairs drops the ring to the PCIe rate
    assert nvl.bottleneck_gbps((0, 1)) > 4 * nvl.bottleneck_gbps((0, 1, 2, 3))
    assert len(nvl.islands_spanned((1, 2))) == 2


def test_four_way_bridge_sums_links_and_switch_does_not():
    nvl = load_preset("h200-nvl-8")
    pair = nvl.bottleneck_gbps((0, 1))
    assert nvl.bottleneck_gbps((0, 1, 2, 3)) == pytest.approx(3 * pair)
    hgx = load_preset("hgx-h100-8")
    assert hgx.bottleneck_gbps(range(8)) == hgx.bottleneck_gbps((0, 1))


def test_without_nvlink_has_no_islands():
    topo = load_preset("hgx-h200-8").without_nvlink()
    assert all(len(i) == 1 for i in topo.islands())
    assert topo.bottleneck_gbps((0, 1)) == topo.pcie_gbps


def test_ring_prefers_fast_links_in_hybrid_mesh():
    # a 4-cycle of NVLink with slow diagonals: the best ring uses only the NVLink edges
    from topowise.topology.model import build
    kinds = {(0, 1): "NV", (1, 2): "NV", (2, 3): "NV", (0, 3): "NV", (0, 2): "SYS", (1, 3): "SYS"}
    topo = build("cycle", "Tesla V100-SXM2-32GB", kinds, nvlink_counts={p: 1 for p in kinds})
    assert topo.bottleneck_gbps(range(4)) == 25.0


@pytest.mark.parametrize("text,msg", [("0,0", "twice"), ("9", "out of range"), ("a", "not a GPU index")])
def test_bad_gpu_lists(text, msg):
    with pytest.raises(UsageError, match=msg):
        parse_gpu_list(text, load_preset("h100-nvl-8"))


def test_gpu_list_ranges():
    assert parse_gpu_list("0,2-4", load_preset("h100-nvl-8")) == (0, 2, 3, 4)


def test_cli_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "topo" in capsys.readouterr().out
