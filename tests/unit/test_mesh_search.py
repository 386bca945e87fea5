"""The planner's search over the mesh degrees (planner/mesh_search.py)."""

from topowise.models.spec import load_model
from topowise.planner.mesh_search import search_mesh
from topowise.topology import load_topology


def island_of(topo):
    return {g: i for i, isl in enumerate(topo.islands()) for g in isl}


def test_tp_never_leaves_an_nvlink_island_and_says_why_it_is_capped():
    topo = load_topology("h100-nvl-8")  # NVLink bridge pairs, PCIe between them
    found = search_mesh(topo, load_model("llama3.1-8b"), tuple(range(8)), seq_len=8192, global_batch=16)
    assert found.why.startswith("TP up to 2 stays inside each NVLink island of 2 GPUs")
    assert found.ranked and all(p.run.tp <= 2 for p in found.ranked)
    board = load_topology("2x hgx-h100-8+ib-ndr")
    big = search_mesh(board, load_model("llama3.1-70b"), tuple(range(16)), seq_len=8192, global_batch=32)
    islands = island_of(board)
    from topowise.costmodel.parallel import mesh_of

    for pred in big.ranked:
        for group in mesh_of(pred.run).groups("tp"):
            assert len({islands[g] for g in group}) == 1, (pred.run.tp, group)


def test_plain_fsdp_wins_where_the_model_fits_without_model_parallelism():
    topo = load_topology("hgx-h100-8")
    found = search_mesh(topo, load_model("llama3.2-1b"), tuple(range(8)), seq_len=4096, global_batch=16)
    best = found.best.run
    assert (best.tp, best.pp, best.cp) == (1, 1, 1)


def test_405b_on_64_hgx_nodes_gets_a_fitting_model_parallel_plan():
    topo = load_topology("64x hgx-h100-8+ib-ndr")
    found = search_mesh(topo, load_model("llama3.1-405b"), tuple(range(512)), seq_len=8192, global_batch=1024)
    assert found.ranked and all(p.fits for p in found.ranked)
    best = found.best.run
    assert best.tp * best.pp > 1 and best.global_batch == 1024  # 405B does not fit with data parallelism alone
    assert found.pruned_by_memory > 0


def test_plan_mesh_prints_the_ranked_meshes_and_exports_the_fastest_the_launcher_runs(capsys):
    import json

    from tests.unit.cli_run import cli_output

    code, out, _ = cli_output(["plan", "--mesh", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--seq-len",
                               "8192", "--global-batch", "16", "--export", "torchtitan", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["why"].startswith("TP up to 2") and data["plans"]
    assert all((p.get("mesh") or {"tp": 1})["tp"] <= 2 for p in data["plans"])
    text = data["export"]["text"]
    # torchtitan runs no one-stage zero-bubble schedule: the export is the fastest plan it can run
    assert "pipeline_parallel_schedule ZB" not in text and "--training.global_batch_size 16" in text
