"""The study's network sections: --network per cluster (table, plot, study.json) and the four network
questions (report/networks.py), each sentence made from the rows under it."""

import copy

import pytest

from topowise.cli.main import main
from topowise.models.spec import load_model
from topowise.report import networks
from topowise.report import study as st
from topowise.topology import load_topology

CLUSTER = "2x hgx-h100-8+ib-ndr"


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def test_study_network_section_round_trips_and_renders(tmp_path, tiny):
    from topowise.report.plots import plot_networks
    from topowise.report.render import report_blocks, to_markdown

    study = st.run_study(tiny, [(CLUSTER, load_topology(CLUSTER))], seq_len=256, networks=("ib-ndr", "eth-100"))
    data = study.to_dict()
    rows = data["networks"][0]["rows"]
    assert data["networks"][0]["topology"] == CLUSTER and [r["network"] for r in rows] == ["ib-ndr", "eth-100"]
    assert rows[0]["tokens_per_s"] >= rows[1]["tokens_per_s"] and all(r["gpus"] == 16 for r in rows)
    assert plot_networks(study, tmp_path / "networks.png").is_file()
    report = to_markdown(report_blocks(study, {}))
    assert "## The same job on other networks" in report and "| eth-100 |" in report
    assert st.Study.from_dict(copy.deepcopy(data)).to_dict() == data


def test_study_network_needs_a_cluster(tmp_path, capsys):
    assert main(["study", "--model", "tiny", "--topologies", "hgx-h100-8", "--network", "ib-ndr",
                 "--out", str(tmp_path / "s")]) == 2
    assert "name a cluster among --topologies" in capsys.readouterr().err


def test_infiniband_answer_is_made_from_its_rows(tiny):
    answer = networks.infiniband_worth_it([tiny], seq_len=256, micro_batch=1)
    rows = answer.values["tiny"]
    ib = next(r for r in rows if r["network"] == "ib-ndr")
    assert f"{ib['cost']['usd_per_million_tokens']:.3f} USD per 1M tokens" in answer.sentences[0]
    assert len(answer.tables) == 1 and len(answer.tables[0][2]) == len(rows)


def test_gigabit_answer_sorts_sizes_and_calls_practical_by_the_wait():
    answer = networks.zero2_over_gigabit([load_model("llama3.2-1b"), load_model("gpt2")], seq_len=1024)
    rows = answer.values["rows"]
    assert [r["model"] for r in rows] == ["gpt2", "llama3.2-1b"]
    for r in rows:
        assert r["practical"] == (r["network_wait_fraction"] < networks.PRACTICAL_WAIT)
        assert r["vs_reference"] <= 1.0  # 1 GbE never beats 100 GbE
    assert answer.sentences[0].startswith(("no:", "up to", "yes"))


def test_racks_apart_only_add_latency(tiny):
    answer = networks.racks_apart([tiny], seq_len=256, micro_batch=1)
    rows = answer.values["tiny"]
    extras = [r["hop_extra_us"] for r in rows]
    steps = [r["step_time_s"] for r in rows]
    assert extras == sorted(extras) and steps == sorted(steps)  # farther never faster


def test_regions_answer_compares_with_one_region_and_encryption_never_helps(tiny):
    answer = networks.across_regions([tiny], seq_len=256, micro_batch=1)
    rows = answer.values["tiny"]
    assert rows[0]["setup"] == "one region" and rows[0]["vs_one_region"] == 1.0
    plain = next(r for r in rows if r["setup"] == "none")
    for r in rows[1:]:
        assert r["wan_gbps"] <= plain["wan_gbps"] + 1e-9
        assert r["tokens_per_s"] <= plain["tokens_per_s"] * (1 + 1e-9)
    assert load_topology("two-region-h100").num_regions == 2


def test_study_report_answers_the_four_questions(tiny):
    from topowise.report.render import report_blocks, to_markdown

    study = st.run_study(tiny, [(CLUSTER, load_topology(CLUSTER))], seq_len=256, question_models=(tiny,))
    assert [a.key for a in study.questions] == ["infiniband", "gigabit", "racks", "regions"]
    text = to_markdown(report_blocks(study, {}))
    assert "## Networks: four questions" in text
    for a in study.questions:
        assert f"### {a.title}" in text and a.sentences and "not answered" not in a.sentences[0]
    data = study.to_dict()
    assert st.Study.from_dict(copy.deepcopy(data)).to_dict() == data


def test_regions_answer_says_nothing_fits_for_a_model_too_large_for_the_regions():
    big = load_model("llama3.1-405b")  # 405B on 4 nodes of 8x H100: no strategy fits, encrypted or not
    answer = networks.across_regions([big], seq_len=4096, micro_batch=1)
    rows = answer.values["llama3.1-405b"]
    assert all(r["tokens_per_s"] is None for r in rows)
    assert answer.sentences == ("llama3.1-405b: not answered (nothing fits).",)
