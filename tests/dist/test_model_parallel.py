"""`bench train --tp/--pp` on CPU with gloo: each mesh's losses against DDP's on the same data and weights.

The mesh run's micro-batch j of data-parallel rank d draws what DDP's rank d x grad_accum + j draws, so
every combination here (dp x grad_accum = 4 sequences of 2 per step) is compared with DDP over 4 processes
(its arithmetic, in this process: `ddp_losses`). One torchrun launch per combination, the tiny model, 3 steps.
"""

import json

import pytest

from topowise.errors import UsageError
from topowise.measure import train

pytest.importorskip("torch")

# lr 1e-2: the tiny model's loss falls by about 5% in 3 steps, so that the trajectories carry the wiring
ARGS = ["--device", "cpu", "--model", "tiny", "--micro-batch", "2", "--seq-len", "32", "--steps", "3", "--warmup",
        "0", "--lr", "1e-2", "--json"]
# Same weights, same data, the arithmetic in another order: bf16 roundings, which Adam's normalisation lets grow
# (1.1e-4 at most in 3 steps, every combination; by a 4th step DDP itself and its one-process form differ by
# 4e-4). A q/k/v Linear sharded without regrouping its heads per rank (reorder_qkv_for_tp left out) differs
# from DDP by 0.11% at the first step and 0.19% at the second.
MESH_LOSS_RTOL = 5e-4

COMBINATIONS = {  # name: (processes, strategy, mesh flags); dp x grad_accum = 4 everywhere
    "tp2": (2, "ddp", ["--tp", "2", "--grad-accum", "4"]),
    "pp2": (2, "ddp", ["--pp", "2", "--grad-accum", "4"]),
    "fsdp2xtp2": (4, "zero3", ["--tp", "2", "--grad-accum", "2"]),
    "pp2xfsdp2": (4, "zero3", ["--pp", "2", "--grad-accum", "2"]),
}


def bench(nproc: int, strategy: str, flags: list[str], capsys) -> dict:
    from topowise.cli.main import main

    status = main(["bench", "train", *ARGS, "--nproc", str(nproc), "--strategies", strategy, *flags])
    record = json.loads(capsys.readouterr().out)["records"][0]
    assert status == 0 and record["status"] == "ok", (record.get("error"), record.get("log_tail"))
    return record


@pytest.fixture(scope="module")
def ddp_losses():
    """DDP's arithmetic over 4 processes, in this one: the mean of the 4 ranks' losses (DDP averages their
    gradients), the same weights, batches, autocast and AdamW; a launch less than running DDP itself
    (tests/dist/test_bench_train.py holds DDP to the other strategies)."""
    import torch
    import torch.nn.functional as F

    from topowise.measure import steps
    from topowise.measure.strategies import make_optimizer
    from topowise.models.spec import load_model
    from topowise.models.transformer import build_model
    from topowise.run import Run

    case = train.TrainCase(run=Run(model=load_model("tiny"), gpus=(0, 1, 2, 3), strategy="ddp", micro_batch=2,
                                   seq_len=32), steps=3, warmup=0, device="cpu", lr=1e-2)
    model = build_model(case.run.model, case.run.seq_len, "cpu", case.seed)
    optimizer = make_optimizer(model.parameters(), lr=case.lr, weight_decay=case.weight_decay, device_type="cpu")
    batches = [steps.synthetic_batches(case, rank, case.run.model.vocab_size, "cpu") for rank in range(4)]
    losses = []
    for step in range(case.steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            per_rank = [F.cross_entropy(model(x[step]).flatten(0, 1).float(), y[step].flatten()) for x, y in batches]
        loss = torch.stack(per_rank).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert losses[-1] < 0.97 * losses[0]  # it trains: the comparison means something
    return losses


@pytest.mark.dist
@pytest.mark.parametrize("name", COMBINATIONS)
def test_mesh_losses_agree_with_ddp(name, ddp_losses, capsys):
    nproc, strategy, flags = COMBINATIONS[name]
    record = bench(nproc, strategy, flags, capsys)
    assert record["losses"] == pytest.approx(ddp_losses, rel=MESH_LOSS_RTOL)
    tp = int(flags[flags.index("--tp") + 1]) if "--tp" in flags else 1
    pp = int(flags[flags.index("--pp") + 1]) if "--pp" in flags else 1
    dp = nproc // (tp * pp)
    assert (record["tp"], record["pp"], record["dp"]) == (tp, pp, dp)
    replicated = strategy == "ddp"  # ddp replicates over dp; zero3 shards over it
    assert record["mesh"] == {"pp": pp, "dp_replicate": dp if replicated else 1, "dp_shard": 1 if replicated else dp,
                              "cp": 1, "tp": tp}
    ranks = record["ranks"]
    assert [r["rank"] for r in ranks] == list(range(nproc))
    # every mesh coordinate once; each pipeline rank holds its stage
    assert len({tuple(r["mesh"].values()) for r in ranks}) == nproc
    assert all(r["stages"] == [r["mesh"]["pp"]] for r in ranks)
    assert all(r["step_time_s"] > 0 for r in ranks)


@pytest.mark.dist
@pytest.mark.skip(reason="cp2: PyTorch's context_parallel swaps the flash / efficient / cuDNN SDPA kernels for ring "
                         "attention; a CPU has only the math kernel, so gloo cannot run it (bench train refuses "
                         "--cp on CPU)")
def test_cp2_losses_agree_with_ddp():
    """Where a GPU pair is lent: `bench train --nproc 2 --cp 2` against DDP at 1 process."""


def test_refused_before_launch_with_the_arithmetic():
    for flags, words in (({"cp": 2}, "needs CUDA"), ({"pp": 2, "grad_accum": 1}, "at least 2 micro-batches"),
                         ({"tp": 3}, "do not divide")):
        with pytest.raises(UsageError, match=words):
            train.make_request(model="tiny", strategies="ddp", seq_len=32, device="cpu", nproc=2 if "tp" not in flags
                               else 4, mesh=flags)
    with pytest.raises(UsageError, match="ties its output layer"):
        train.make_request(model="llama3.2-1b", strategies="ddp", seq_len=32, device="cpu", nproc=2,
                           mesh={"pp": 2, "grad_accum": 2})


@pytest.mark.dist
def test_a_traced_tp2_x_pp2_run_attributes_its_exposed_communication_to_each_dimension(capsys, tmp_path):
    """Every rank's exposed communication named by mesh dimension (gloo's worker threads learned from the probes,
    the pipeline's sends and receives on the calling thread), and each stage's idle time beside the replay."""
    record = bench(4, "ddp", ["--tp", "2", "--pp", "2", "--grad-accum", "2", "--trace", str(tmp_path)], capsys)
    by_rank = record["exposed_comm_by_dim_s"]
    assert sorted(by_rank) == ["0", "1", "2", "3"]
    for dims in by_rank.values():
        assert set(dims) == {"tp", "pp"}, by_rank  # nothing "unknown": every collective's group was told
        assert all(seconds > 0 for seconds in dims.values()), by_rank
    bubble = record["pipeline_bubble"]
    assert (bubble["schedule"], bubble["pp"], bubble["microbatches"]) == ("1f1b", 2, 2)
    assert [(s["stage"], s["ranks"]) for s in bubble["stages"]] == [(0, [0, 1]), (1, [2, 3])]
    assert all(0 < s["idle_s"] < s["step_s"] and s["predicted_idle_s"] > 0 for s in bubble["stages"]), bubble
    doc = json.loads((tmp_path / "ddp" / "breakdown.json").read_text())
    assert doc["exposed_comm_by_dim_s"] == by_rank and doc["pipeline_bubble"] == bubble
