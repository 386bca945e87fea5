"""`topowise nccl-tests`: the expected table in nccl-tests' layout, the parser on real posted outputs,
and the comparison that names the sizes that fall short and why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from topowise import nccltests
from topowise.cli.main import main
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.topology import load_topology

DATA = Path(__file__).parents[1] / "data" / "nccl_tests"
SOURCES = json.loads((DATA / "sources.json").read_text())["files"]
A100 = DATA / "a100x24-4hdr_nccl-tests-119.txt"


def _scaled(path: Path, factor: float, from_bytes: int = 0) -> str:
    """A copy of an output with the algbw and busbw of rows from `from_bytes` up scaled (time divided)."""
    out = []
    for line in path.read_text().splitlines():
        w = line.split()
        if len(w) >= 13 and w[0].isdigit() and int(w[0]) >= from_bytes:
            for i in (5, 9):
                w[i] = f"{float(w[i]) / factor:.1f}"
            for i in (6, 7, 10, 11):
                w[i] = f"{float(w[i]) * factor:.2f}"
            line = "  ".join(w)
        out.append(line)
    return "\n".join(out) + "\n"


# --- sources and parsing -----------------------------------------------------------------------------
def test_every_saved_output_has_a_source_and_parses():
    files = sorted(p.name for p in DATA.glob("*.txt"))
    assert 4 <= len(files) <= 8 and set(files) == set(SOURCES)
    for name in files:
        src = SOURCES[name]
        assert src["url"].startswith("https://github.com/") and src["hardware"]
        out = nccltests.parse_output((DATA / name).read_text(), name)
        assert out.rows and out.ops == (src["op"],)
        assert all(r.busbw_gbps >= 0 and r.bytes > 0 for r in out.rows)


def test_new_layout_and_rank_lines():
    out = nccltests.parse_output((DATA / "gb10x2_dgx-spark-playbooks-103.txt").read_text())
    assert out.layout == "new" and out.ranks == 2 and out.nodes == 2 and out.gpu_name == "NVIDIA GB10"
    first = out.rows[0]
    assert (first.bytes, first.count, first.root, first.time_us, first.busbw_gbps) == (8192, 2048, -1, 35.15, 0.23)
    assert first.in_busbw_gbps == 0.27 and first.best_busbw == 0.27 and first.wrong == 0


def test_old_layout_without_root_column():
    out = nccltests.parse_output((DATA / "h20x16-old-layout_nccl-1244.txt").read_text())
    assert out.layout == "old" and len(out.rows) == 8
    row = out.rows[-1]
    assert (row.bytes, row.count, row.root, row.time_us, row.busbw_gbps, row.in_busbw_gbps) == (
        512, 128, -1, 46.58, 0.02, 0.02)
    assert row.wrong == pytest.approx(6e-8)


def test_mpi_tags_inside_lines_are_stripped():
    out = nccltests.parse_output((DATA / "h100-mpi-prefix_nccl-1453.txt").read_text())
    assert [r.bytes for r in out.rows][:2] == [1048576, 2097152]
    assert out.rows[1].time_us == 2325.3 and out.rows[1].in_busbw_gbps == 9.65


def test_rank_count_from_the_highest_rank_line_and_the_gpu_model():
    gb200 = nccltests.parse_output((DATA / "gb200-nvl72_coreweave-43.txt").read_text())
    assert gb200.ranks == 72 and gb200.rows[-1].best_busbw == 846.82
    a100 = nccltests.parse_output(A100.read_text())
    assert a100.gpu_name == "NVIDIA A100-SXM4-40GB" and a100.nodes == 1  # the excerpt lists pod01's first ranks


def test_one_process_many_gpus_header_gives_the_rank_count():
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1\n"
            "           8             2     float     sum      -1    20.00    0.00    0.00      0    20.00    0.00"
            "    0.00      0\n")
    assert nccltests.parse_output(text).ranks == 8
    mpi = text.replace("nGpus 8", "nGpus 1")
    assert nccltests.parse_output(mpi).ranks is None  # an MPI run's header counts one process only


def test_op_from_the_test_name_and_from_the_columns():
    row = "     1048576        262144     float    none      -1    10.00  104.86   91.75      0    10.00  104.86" \
          "   91.75      0\n"
    assert nccltests.parse_output(row).ops == ("all_gather",)
    assert nccltests.parse_output("# Collective test starting: reduce_scatter_perf\n"
                                  + row.replace("none", " sum")).ops == ("reduce_scatter",)
    assert nccltests.parse_output(row.replace("    -1", "     0")).ops == ("broadcast",)


@pytest.mark.parametrize("text", ["", "hello\nworld\n", '{"format": "topowise.plan"}',
                                  "GPU0 X NV18\nGPU1 NV18 X\n"])
def test_text_that_is_not_nccl_tests_output_is_refused(text):
    with pytest.raises(UsageError, match="not nccl-tests output"):
        nccltests.parse_output(text, "x.txt")


def test_cli_refuses_a_non_nccl_tests_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    assert main(["nccl-tests", "--topology", "hgx-h100-8", "--compare", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("topowise: error:") and "not nccl-tests output" in err[0]


# --- the expected table ------------------------------------------------------------------------------
def test_expected_table_has_nccl_tests_columns_and_parses_back(capsys):
    assert main(["nccl-tests", "--topology", "hgx-h100-8", "-b", "1M", "-e", "1G", "-f", "4",
                 "--ops", "all_reduce,all_gather"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+time\s+algbw\s+"
                     r"busbw\s+#wrong", text)
    assert "out-of-place" in text and "in-place" in text and "# nThread 1 nGpus 8" in text
    back = nccltests.parse_output(text)
    assert back.ops == ("all_reduce", "all_gather") and back.ranks == 8
    sizes = [r.bytes for r in back.rows if r.op == "all_reduce"]
    assert sizes == [2**20, 2**22, 2**24, 2**26, 2**28, 2**30]


def test_busbw_follows_nccl_tests_factors():
    topo = load_topology("hgx-h100-8")
    gpus = tuple(range(8))
    for op, factor in (("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("broadcast", 1.0)):
        row = nccltests.expected_row(op, 2**30, gpus, topo)
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps * factor)
        assert row.algbw_gbps == pytest.approx(row.bytes / row.time_s / 1e9)


def test_all_gather_size_rounds_each_rank_share_to_16_bytes():
    assert nccltests.nccl_size("all_gather", 1000, 8) == (896, 28)  # 250 floats / 8 = 31 -> 28 per rank
    assert nccltests.nccl_size("all_reduce", 1000, 8) == (1000, 250)


def test_busbw_grows_with_size_to_a_plateau_across_nodes():
    topo = load_topology("2x hgx-h100-8+ib-ndr")
    table = nccltests.expected_table(topo, ["all_reduce"], nccltests.sweep_sizes(8, 2**33, 8))
    bus = [r.busbw_gbps for r in table["tables"]["all_reduce"]]
    assert table["ranks"] == 16 and table["nodes"] == 2
    assert bus == sorted(bus) and bus[-1] > 100 * bus[3]


def test_expected_json(capsys):
    assert main(["nccl-tests", "--topology", "2x hgx-h100-8+ib-ndr", "-b", "1G", "-e", "1G", "--ops", "all_reduce",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["tables"]["all_reduce"][0]
    assert data["ranks"] == 16 and row["bytes"] == 2**30 and row["algorithm"].startswith(("ring", "tree", "nvlstree"))


@pytest.mark.parametrize("argv, words", [
    (["-g", "1"], "--num-gpus 1"), (["-g", "12", "--topology", "2x hgx-h100-8+ib-ndr"], "multiple of the 8"),
    (["-b", "lots"], "--min-bytes"), (["--ops", "alltoall"], "--ops"), (["-b", "1G", "-e", "1M"], "sizes"),
    (["--compare", str(A100), "--op", "allreduce"], "--op")])
def test_bad_arguments_are_one_line_errors(argv, words, capsys):
    full = ["nccl-tests", "--topology", "hgx-h100-8", *argv]
    if argv.count("--topology"):
        full = ["nccl-tests", *argv]
    assert main(full) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and words in err


# --- measured beside expected --------------------------------------------------------------------------
def test_published_a100_run_is_within_fifteen_percent():
    result = nccltests.compare(nccltests.parse_output(A100.read_text()), load_topology(SOURCES[A100.name]["topology"]),
                               num_gpus=24)
    largest = max(result["rows"], key=lambda r: r.bytes)
    assert largest.measured_busbw_gbps == 95.94
    assert 0.85 < largest.ratio < 1.15 and not result["short_sizes"]


def test_published_runs_with_a_forced_algorithm_compare_against_that_algorithm():
    ring = DATA / "4nic-200g-ring_nccl-tests-252.txt"
    src = SOURCES[ring.name]
    result = nccltests.compare(nccltests.parse_output(ring.read_text()), load_topology(src["topology"]),
                               src["num_gpus"], algorithm=src["algo"])
    assert all(0.9 < r.ratio < 1.1 and r.algorithm.startswith("ring") for r in result["rows"])
    tree = DATA / "h100x2-1gpu-per-node-tree_nccl-tests-232.txt"
    src = SOURCES[tree.name]
    topo = load_topology(str(Path(__file__).parents[2] / src["topology"]))
    result = nccltests.compare(nccltests.parse_output(tree.read_text()), topo, src["num_gpus"], algorithm="tree")
    assert all(r.algorithm.startswith("tree") for r in result["rows"]) and result["ranks"] == 2
    # the thread's complaint (tree far short of 4 NICs): one GPU's PCIe link carries them all, and it is met
    assert not result["short_sizes"] and all(r.bound == "gpu-pcie" for r in result["rows"])


def test_degraded_copy_is_flagged_with_a_nic_unused():
    degraded = nccltests.parse_output(_scaled(A100, 0.5))
    result = nccltests.compare(degraded, load_topology("3x dgx-a100-8+ib-hdrx4"), num_gpus=24)
    assert result["short_sizes"]["all_reduce"] == [r.bytes for r in degraded.rows]
    assert any("2 of the node's 4" in h and "NIC unused" in h for h in result["hints"])


def test_a_network_at_a_tenth_points_at_sockets_and_at_two_thirds_at_gpudirect():
    topo = load_topology("3x dgx-a100-8+ib-hdrx4")
    slow = nccltests.compare(nccltests.parse_output(_scaled(A100, 0.09)), topo, num_gpus=24)
    assert any("TCP sockets" in h for h in slow["hints"])
    gdr = nccltests.compare(nccltests.parse_output(_scaled(A100, 0.35)), topo, num_gpus=24)
    assert any("GPUDirect RDMA off" in h for h in gdr["hints"])


def _single_node_output(topo_name: str, scale: float, small_scale: float = 1.0, profile=None) -> str:
    """An 8-GPU output made from the model's own table (under `profile`), bandwidth-bound rows scaled by
    `scale`, latency-bound rows by `small_scale`."""
    topo = load_topology(topo_name)
    table = nccltests.expected_table(topo, ["all_reduce"], nccltests.sweep_sizes(1024, 2**30, 4), profile=profile)
    lines = []
    for r in table["tables"]["all_reduce"]:
        s = small_scale if r.latency_s / r.time_s > nccltests.LATENCY_BOUND else scale
        t = r.time_s * 1e6 / s
        lines.append(f"{r.bytes:12d}  {r.count:12d}  float  sum  -1  {t:.2f}  {r.algbw_gbps * s:.2f}  "
                     f"{r.busbw_gbps * s:.2f}  0  {t:.2f}  {r.algbw_gbps * s:.2f}  {r.busbw_gbps * s:.2f}  0")
    return "# nThread 1 nGpus 8 minBytes 1024 maxBytes 1073741824\n" + "\n".join(lines) + "\n"


def test_nvlink_node_at_pcie_rate_points_at_p2p_disabled():
    topo = load_topology("hgx-h100-8")
    result = nccltests.compare(nccltests.parse_output(_single_node_output("hgx-h100-8", 0.09)), topo)
    assert "all_reduce" in result["short_sizes"]
    assert any("P2P disabled" in h for h in result["hints"])


def test_nvswitch_node_above_a_ring_only_expectation_points_at_nvls_on():
    ring_only = nccltests.without_nvls(default_profile())  # e.g. a profile saying NCCL_NVLS_ENABLE=0
    result = nccltests.compare(nccltests.parse_output(_single_node_output("hgx-h100-8", 1.0)),
                               load_topology("hgx-h100-8"), profile=ring_only)
    assert not result["short_sizes"]
    assert any("NVLink SHARP (NVLS) is on" in h for h in result["hints"])


def test_nvswitch_node_at_the_ring_figure_points_at_nvls_off():
    ring_only = nccltests.without_nvls(default_profile())
    expected = nccltests.expected_row("all_reduce", 2**30, tuple(range(8)), load_topology("hgx-h100-8"))
    assert expected.algorithm == "nvls"  # the default expectation counts NVLS on an H100 board
    result = nccltests.compare(nccltests.parse_output(_single_node_output("hgx-h100-8", 1.0, profile=ring_only)),
                               load_topology("hgx-h100-8"))
    assert 2**30 in result["short_sizes"]["all_reduce"]
    assert any("NVLink SHARP (NVLS) off" in h for h in result["hints"])
    assert not any("P2P disabled" in h for h in result["hints"])


def test_only_small_sizes_short_points_at_latency():
    result = nccltests.compare(nccltests.parse_output(_single_node_output("hgx-h100-8", 1.0, 0.4)),
                               load_topology("hgx-h100-8"))
    short = result["short_sizes"]["all_reduce"]
    assert short and max(short) < 2**24  # the latency-bound end only
    assert any("latency-bound sizes" in h for h in result["hints"])
    assert not any("P2P" in h or "NIC" in h for h in result["hints"])


def test_two_nodes_above_the_network_bound_points_at_tree():
    topo = load_topology("2x pcie-l40s-8+eth-100")  # network-bound: one 100G port per node
    table = nccltests.expected_table(topo, ["all_reduce"], [2**28, 2**30])
    lines = [f"{r.bytes} {r.count} float sum -1 1.0 1.0 {r.busbw_gbps * 1.6:.2f} 0 1.0 1.0 {r.busbw_gbps * 1.6:.2f} 0"
             for r in table["tables"]["all_reduce"]]
    result = nccltests.compare(nccltests.parse_output("\n".join(lines)), topo, num_gpus=16)
    assert any("tree on two nodes beats the network bound" in h for h in result["hints"])


def test_wrong_data_is_reported_first():
    text = A100.read_text().replace("95.74      0   2660.4", "95.74      3   2660.4")
    result = nccltests.compare(nccltests.parse_output(text), load_topology("3x dgx-a100-8+ib-hdrx4"), num_gpus=24)
    assert result["hints"][0].startswith("#wrong is not 0")


def test_compare_needs_a_rank_count(tmp_path, capsys):
    path = tmp_path / "out.txt"
    path.write_text((DATA / "4nic-200g-ring_nccl-tests-252.txt").read_text())
    assert main(["nccl-tests", "--topology", "2x dgx-a100-8+ib-hdrx4", "--compare", str(path)]) == 2
    assert "--num-gpus" in capsys.readouterr().err


def test_compare_cli_text_and_json(capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(_scaled(A100, 0.5)))
    assert main(["nccl-tests", "--topology", "3x dgx-a100-8+ib-hdrx4", "-g", "24", "--compare", "-"]) == 0
    text = capsys.readouterr().out
    assert "short (all_reduce" in text and "hint:" in text and "stdin" in text
    assert main(["nccl-tests", "--topology", "3x dgx-a100-8+ib-hdrx4", "-g", "24", "--compare", str(A100),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"] == 24 and data["measured"]["gpu_name"] == "NVIDIA A100-SXM4-40GB"
    assert data["rows"][-1]["verdict"] == "ok" and data["short_sizes"] == {}


def test_mpirun_tag_output_prefix():
    # as posted in https://github.com/aws/aws-k8s-tester/pull/503 (p5.48xlarge)
    text = ("[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     "
            "time   algbw   busbw  #wrong\n"
            "[1,0]<stdout>:           8             2     float     sum      -1    12.90    0.00    0.00      0    "
            "12.87    0.00    0.00      0\n"
            "[1,0]<stdout>:# Avg bus bandwidth    : 92.3405 \n")
    out = nccltests.parse_output(text)
    assert out.layout == "new" and out.rows[0].time_us == 12.90 and out.avg_busbw == 92.3405


def test_collectives_without_a_model_are_listed_not_compared():
    text = ("# Collective test starting: alltoall_perf\n"
            "     1048576         32768     float    none      -1    30.00   34.95   30.58      0    30.00   34.95"
            "   30.58      0\n")
    out = nccltests.parse_output(text)
    result = nccltests.compare(out, load_topology("hgx-h100-8"), num_gpus=8)
    assert out.ops == ("alltoall",) and result["skipped_ops"] == ["alltoall"] and not result["rows"]


def test_output_from_other_hardware_than_the_topology_is_pointed_out():
    out = nccltests.parse_output((DATA / "gb10x2_dgx-spark-playbooks-103.txt").read_text())
    same = nccltests.compare(out, load_topology("2x hgx-h100-8+ib-ndr"), num_gpus=16)
    assert not any("check --topology" in h for h in same["hints"])  # 2 rank lines, 16 ranks: an excerpt
    two = nccltests.compare(out, load_topology("hgx-h100-8"), num_gpus=2)
    assert any("run on 2 host(s)" in h for h in two["hints"])
    a100 = nccltests.parse_output(A100.read_text())
    h100 = nccltests.compare(a100, load_topology("hgx-h100-8"), num_gpus=4)
    assert any("ran on NVIDIA A100-SXM4-40GB" in h for h in h100["hints"])
