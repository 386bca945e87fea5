"""Predicted scale-out, 1 to 128 nodes, and the four network questions: writes docs/multinode.md.

Scale-out: llama3.1-8b and llama3.1-70b on the cluster presets. The four network questions
(report/networks.py: InfiniBand against RoCE and Ethernet with prices, ZeRO-2 over Gigabit Ethernet,
racks apart, regions with an encrypted WAN) for llama3.2-1b and llama3.1-8b, as the study answers them.

These are predictions of topowise's cost model (costmodel/step.py for compute and memory,
costmodel/network.py for collectives across nodes), not measurements. Per-GPU work is fixed
(micro-batch 1 x 4096 tokens per GPU per step), so the global batch grows with the node count.
At every point the fastest strategy that fits in memory is taken (ddp, zero1, zero2, zero3, hsdp
with one shard group per node; activation checkpointing only where it is needed to fit).

    python benchmarks/scaleout.py            # writes docs/multinode.md and research/scaleout.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from topowise.costmodel import network
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.report import networks as questions
from topowise.report.render import to_markdown
from topowise.run import Run
from topowise.topology.cluster import load_cluster

ROOT = Path(__file__).resolve().parent.parent
NODES = (1, 2, 4, 8, 16, 32, 64, 128)
CLUSTERS = ("hgx-h100-8+ib-ndr", "dgx-a100-8+ib-hdr", "h100-nvl-8+roce-200", "pcie-l40s-8+eth-100",
            "hgx-h100-8+eth-100")
MODELS = ("llama3.1-8b", "llama3.1-70b")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
SEQ_LEN = 4096
MICRO_BATCH = 1
TABLE_NODES = 4  # the per-strategy table
QUESTION_MODELS = ("llama3.2-1b", "llama3.1-8b")  # the four network questions: two model sizes
COMMAND = "python benchmarks/scaleout.py"


def options(cluster, nodes: int):
    """(strategy, shard group size) worth predicting on `nodes` whole nodes."""
    out = [(s, None) for s in STRATEGIES if s != "hsdp"]
    for shard_nodes in (1, 4):  # shard groups of one node, and of four (for models one node cannot hold)
        if nodes > shard_nodes and nodes % shard_nodes == 0:
            out.append(("hsdp", shard_nodes * cluster.gpus_per_node))
    return out


def predict_point(model, cluster, nodes: int, strategy: str, shard, profile):
    """The prediction without checkpointing if it fits, else with it (None if neither fits)."""
    gpus = tuple(range(nodes * cluster.gpus_per_node))
    for ac in (False, True):
        run = Run(model, gpus, strategy, micro_batch=MICRO_BATCH, seq_len=SEQ_LEN,
                  checkpointing="full" if ac else "none", shard_group_size=shard)
        p = predict(run, cluster, profile)
        if p.fits:
            return p
    return None


def sweep(profile) -> dict:
    """model -> cluster -> nodes -> {strategy: prediction or None}."""
    out: dict = {}
    for model_name in MODELS:
        model = load_model(model_name)
        for name in CLUSTERS:
            for nodes in NODES:
                cluster = load_cluster(f"{nodes}x {name}")
                row = {s if shard in (None, cluster.gpus_per_node) else f"{s}({shard})":
                       predict_point(model, cluster, nodes, s, shard, profile) for s, shard in options(cluster, nodes)}
                out.setdefault(model_name, {}).setdefault(name, {})[nodes] = row
    return out


def best(row: dict):
    fitting = [p for p in row.values() if p is not None]
    return max(fitting, key=lambda p: p.tokens_per_s) if fitting else None


def label(p) -> str:
    s = p.strategy + ("" if p.shard_group_size is None else f"({p.shard_group_size})")
    return s + (" +AC" if p.activation_checkpointing else "")


def traffic_gb(model, cluster, p) -> float:
    t = network.network_traffic(p.strategy, model.params, p.gpus, cluster, shard_group=p.shard_group_size)
    return t["bytes_per_gpu"] / 1e9


def question_lines(profile) -> list[str]:
    """The four network questions, answered as the study answers them (report/networks.py)."""
    answers = questions.answer_all([load_model(m) for m in QUESTION_MODELS], seq_len=SEQ_LEN,
                                   micro_batch=MICRO_BATCH, profile=profile)
    return to_markdown(questions.blocks(answers)).rstrip("\n").splitlines()


UNVALIDATED = [
    "## What remains unvalidated, and why",
    "",
    "Nothing on this page ran on a cluster: the machines this project measures on are single hosts",
    "(H200 GPUs in one box, no NICs between hosts), so no multi-node step time, no collective across",
    "real NICs and no WAN has been measured here. What stands behind each part (the network model's own",
    "list: [networks.md, \"What remains unvalidated\"](networks.md#what-remains-unvalidated-and-why)):",
    "",
    "- Network rates and latencies: published nccl-tests outputs and NCCL's own tuner constants",
    "  ([networks.md](networks.md), [sources.md](sources.md)); `topowise nccl-tests` sets published outputs",
    "  beside the model's expected bus bandwidth ([nccl-tests.md](nccl-tests.md)). A cluster's own",
    "  `bench comm` run is the check.",
    "- The socket transport (Ethernet without RoCE): NCCL's documented limits and published issue-thread",
    "  measurements; loopback on one CPU host can exercise the code path, not a real NIC or switch.",
    "- Distance between racks: fibre at 5 ns per metre and switch datasheet latencies, never timed here;",
    "  the answer above is that microseconds per hop do not move a step of hundreds of milliseconds.",
    "- Encryption: AES-GCM and ChaCha20 throughput per core is measured on the host by `topowise",
    "  calibrate --only encryption` (research/2026-12-01-cpu-encryption); the WAN itself (TCP over",
    "  a long round trip, window limits, loss) is not modelled beyond its rate and one-way latency.",
    "- Gradient accumulation across regions (the cross-region all-reduce once per k micro-batches, FSDP2",
    "  `set_requires_all_reduce(False)` on the others) is arithmetic on the predicted step, not a run.",
    "- Prices: public list prices on the dates in docs/sources.md; they change, and the network's",
    "  switch port and cable are taken as costing as much as the NIC (an assumption, not a quote). Give",
    "  your own with `--gpu-hour-usd` and `--network-node-hour-usd`.",
    "- \"Practical\" in question 2 (the GPUs waiting on the network less than half the step) is a definition",
    "  made here, not a published threshold.",
]

WHATIF_USAGE = [
    "",
    "What-if networks and prices (the same cluster shape and node preset, each network with its own NIC",
    "count rule; the cost per million tokens from `topowise/prices.py` or your prices):",
    "",
    "    topowise plan --model llama3.1-8b --topology '4x hgx-h100-8+ib-ndr' \\",
    "                  --network ib-ndr,roce-400,eth-100,eth-10 [--json]",
    "    topowise predict --model llama3.1-8b --topology '4x hgx-h100-8+ib-ndr' --num-gpus 32 \\",
    "                  --strategy zero2 --network ib-ndr,eth-100x8 --gpu-hour-usd 2.5 \\",
    "                  --network-node-hour-usd ib-ndr=1.1,eth-100=0.2",
    "    topowise study --topologies '4x hgx-h100-8+ib-ndr' --network ib-ndr,roce-400,eth-100",
    "    topowise plan --model llama3.1-8b --topology two-region-h100 --wan-share 0.05",
    "",
    "Across regions the planner tries HSDP with one shard group per region beside FSDP and DDP across",
    "the WAN, says in each plan's reasons what the WAN costs the step, and how many micro-batches per",
    "optimizer step (the cross-region all-reduce once per k) bring the WAN's share under `--wan-share`.",
]


def render_markdown(results: dict, profile) -> str:
    lines = [
        "# Beyond one machine: predicted multi-node step times",
        "",
        "**These are predictions of the cost model, not measurements.** Nothing here ran on a cluster.",
        f"They were made by `{COMMAND}` with the default profile (no calibration file). Compute and memory",
        "come from costmodel/step.py; collectives that cross nodes from costmodel/network.py (NCCL's own",
        "ring/tree latency-bandwidth model, tuning.cc of NCCL 2.20.3, with the bus bandwidth set by the",
        "slower of the node's ring and the node's NICs). Network rates are hardware.NETWORKS (measured",
        "busbw per NIC where published, NCCL's socket transport for Ethernet without RDMA; docs/networks.md,",
        "docs/sources.md).",
        "",
        f"Per-GPU work is fixed: micro-batch {MICRO_BATCH} x {SEQ_LEN} tokens per GPU per step, so the global",
        "batch grows with the node count and a perfect network would keep tokens/s per GPU flat.",
        "",
        "## Using it",
        "",
        "A cluster is `N` nodes of a node preset plus the network: `4x hgx-h100-8+ib-ndr`,",
        "`2x h100-nvl-8+roce-200`, `4x pcie-l40s-8+eth-100`, `2x pcie-l40s-8+eth-100x4` (four NICs per",
        "node). InfiniBand and RoCE default to one NIC per GPU on a rail-optimized fabric, 100G Ethernet",
        "to one port per node. `topowise topo --preset '4x hgx-h100-8+ib-ndr' --json` writes the JSON form",
        "(format `topowise.cluster`, the node topology embedded), which `--topology FILE` reads back.",
        "GPUs are numbered node by node (node n holds n*G .. n*G+G-1).",
        "",
        "    topowise topo --preset '4x pcie-l40s-8+eth-100'          # tiers and the per-GPU network share",
        "    topowise plan --model llama3.1-8b --topology '4x hgx-h100-8+ib-ndr' --num-gpus 32 --export slurm",
        "    topowise plan ... --export torchrun                       # one torchrun command per node",
        "    srun --nodes 2 --ntasks-per-node 1 torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\",
        "         --rdzv-endpoint $HEAD:29500 -m topowise bench comm   # inside a job: joins it",
        "    NCCL_ALGO=Tree srun ... -m topowise bench comm           # the same, on NCCL's tree",
        "    topowise bench comm --algo ring,tree                      # one node: both, records labelled",
        *WHATIF_USAGE,
        "",
        *question_lines(profile),
        "",
        "## Cluster presets",
        "",
        "| cluster | GPUs per node | network per node | per-GPU network share |",
        "|---|---|---|---|",
    ]
    for name in CLUSTERS:
        c = load_cluster(f"2x {name}")
        net = c.network
        lines.append(f"| `Nx {name}` | {c.gpus_per_node} | {net.nics_per_node} x {net.label} "
                     f"({net.node_gbps:.0f} GB/s{', rail-optimized' if net.rail_optimized else ''}) "
                     f"| {c.network_gbps_per_gpu:.1f} GB/s |")
    for model_name in MODELS:
        model = load_model(model_name)
        lines += ["", f"## {model_name}: every strategy on {TABLE_NODES} nodes", "",
                  "Predicted step time in ms (tokens/s per GPU); `-` does not fit even with activation "
                  "checkpointing; +AC needs it to fit. Network: GB each GPU sends between nodes per step.", "",
                  "| cluster | " + " | ".join(STRATEGIES) + " | best | network GB/GPU/step (best) |",
                  "|---|" + "---|" * (len(STRATEGIES) + 2)]
        for name in CLUSTERS:
            cluster = load_cluster(f"{TABLE_NODES}x {name}")
            row = results[model_name][name][TABLE_NODES]
            cells = []
            for s in STRATEGIES:
                p = row.get(s)
                cells.append("-" if p is None else f"{p.step_time_s * 1e3:,.0f} ({p.tokens_per_s_per_gpu:,.0f})"
                             + (" +AC" if p.activation_checkpointing else ""))
            b = best(row)
            lines.append(f"| {name} | " + " | ".join(cells)
                         + (f" | {label(b)} | {traffic_gb(model, cluster, b):.1f} |" if b else " | - | - |"))
        lines += ["", f"## {model_name}: scale-out, best strategy at each size", "",
                  "Tokens/s per GPU (strategy); efficiency = per-GPU throughput over the best per-GPU "
                  "throughput at the smallest size that fits.", "",
                  "| nodes | " + " | ".join(CLUSTERS) + " |", "|---|" + "---|" * len(CLUSTERS)]
        for nodes in NODES:
            cells = []
            for name in CLUSTERS:
                b = best(results[model_name][name][nodes])
                ref = next((best(results[model_name][name][n]) for n in NODES if best(results[model_name][name][n])),
                           None)
                if b is None:
                    cells.append("does not fit")
                else:
                    eff = b.tokens_per_s_per_gpu / ref.tokens_per_s_per_gpu
                    cells.append(f"{b.tokens_per_s_per_gpu:,.0f} ({label(b)}, {100 * eff:.0f}%)")
            lines.append(f"| {nodes} | " + " | ".join(cells) + " |")
    lines += ["", "## Network traffic per step", "",
              "GB each GPU sends between nodes per training step on 4 nodes x 8 GPUs (ring accounting; "
              "costmodel/network.py `network_traffic`). fp32 gradients are reduced, bf16 parameters gathered "
              "(as topowise's benchmark holds them). hpZ is DeepSpeed ZeRO++'s hierarchical partitioning "
              "(zero3 whose backward all-gather stays inside the node), where that engine is used.", "",
              "| model | ddp | zero1 | zero2 | zero3 | hsdp (shard = node) | hpZ (DeepSpeed) |",
              "|---|---|---|---|---|---|---|"]
    c4 = load_cluster("4x hgx-h100-8+ib-ndr")
    for model_name in MODELS:
        params = load_model(model_name).params
        cells = [network.network_traffic(s, params, c4.indices, c4,
                                         engine="deepspeed" if s == "hpz" else "torch")["bytes_per_gpu"] / 1e9
                 for s in ("ddp", "zero1", "zero2", "zero3", "hsdp", "hpz")]
        lines.append(f"| {model_name} | " + " | ".join(f"{v:.1f}" for v in cells) + " |")
    lines += ["", "With fp32 gradient reduction HSDP sends 2(N-1)/N x 4P/G bytes per GPU between N nodes of G",
              "GPUs (an fp32 all-reduce of each shard) against FSDP's (n-1)/n x 8P/G (bf16 gathers twice, fp32",
              "reduce-scatter): fewer on few nodes, about as many on many. What HSDP saves besides is latency",
              "and exposure: its all-gathers and reduce-scatters are rings of G inside a node and only one",
              "all-reduce per layer crosses the network, against FSDP's rings over every GPU of the job (NCCL",
              "has no tree for all-gather and reduce-scatter). So HSDP pulls ahead where the node's links are",
              "much faster than its NICs, and at many nodes.",
              "", "## HSDP against FSDP (zero3) across nodes", "",
              "Predicted zero3 step time over the faster hsdp (shard groups of one node, or of four for a model "
              "one node cannot hold); above 1 HSDP is faster.", "",
              "| model | cluster | " + " | ".join(f"{n} nodes" for n in NODES[1:]) + " |",
              "|---|---|" + "---|" * (len(NODES) - 1)]
    skipped: list[str] = []
    for model_name in MODELS:
        for name in CLUSTERS:
            cells = []
            for nodes in NODES[1:]:
                row = results[model_name][name][nodes]
                z3 = row.get("zero3")
                h = min((p for k, p in row.items() if k.startswith("hsdp") and p is not None),
                        key=lambda p: p.step_time_s, default=None)
                cells.append("-" if z3 is None or h is None else f"{z3.step_time_s / h.step_time_s:.2f}")
            if any(c != "-" for c in cells):
                lines.append(f"| {model_name} | {name} | " + " | ".join(cells) + " |")
            else:
                skipped.append(f"{model_name} on {name}")
    if skipped:
        lines += ["", "Left out (no hsdp shard group tried fits in memory, or zero3 does not): "
                  + "; ".join(skipped) + "."]
    lines += ["", "## Ring or tree: where NCCL's model switches", "",
              "All-reduce over every GPU of the cluster: the size below which tree is faster (NCCL's first",
              "crossing; ring's latency grows with 2(n-1) steps, tree's with 2 log2 N network hops).", "",
              "| cluster | " + " | ".join(f"{n} nodes" for n in (2, 8, 32, 128)) + " |", "|---|" + "---|" * 4]
    for name in CLUSTERS:
        cells = []
        for nodes in (2, 8, 32, 128):
            c = load_cluster(f"{nodes}x {name}")
            cross = network.crossover_bytes(network.describe_group(c.indices, c), profile)
            cells.append("tree throughout" if cross is None else _size(cross))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## The model, in short", "",
              "For a group of n GPUs on N nodes, k on each (costmodel/network.py; tuning.cc = NCCL 2.20.3",
              "src/graph/tuning.cc, `ncclTopoTuneModel` and `ncclTopoGetAlgoTime`):", "",
              "    bus    = min(node ring over k GPUs x achieved fraction, k x per-GPU NIC share)",
              "    time   = latency + bytes / algbw                          (us and GB/s in tuning.cc)",
              "    ring   latency = base + (2(n-1) - 2N) x intra + 2N x net,  algbw = bus x n / 2(n-1)",
              "    tree   latency = base + 2 ((k-1) x intra + log2(N) x net), "
              "algbw = 0.5 x 0.92 x bus x correction(size)",
              "",
              "base, intra and net are tuning.cc's baseLat/hwLat per protocol (LL: low latency, a quarter of",
              "the bandwidth; Simple: full bandwidth); each algorithm takes the faster protocol, the tuner the",
              "faster algorithm (`--algo`-style forcing is `collective_time_s(..., algorithm=\"ring\")`). Both",
              "algorithms move about the same bytes (NCCL 2.4's double binary trees keep full bandwidth), so",
              "tree's bandwidth is about 0.92 of ring's on many ranks; what differs is latency, linear in n",
              "for ring, logarithmic in N for tree. All-gather and reduce-scatter are rings only. On boards",
              "whose NVSwitch reduces (H100/H200), NCCL's NVLS-Tree is a third all-reduce algorithm: NVLink",
              "SHARP inside the node, a tree across nodes (docs/networks.md, \"NVLS-Tree\"). Groups",
              "inside one node use costmodel/comm.py (calibrated on this project's H200 measurements).", "",
              "![predicted scale-out](../research/scaleout.png)", "",
              "What the model leaves out: in-network reduction in the network's switches (InfiniBand SHARP,",
              "NCCL's CollNet: off unless NCCL_COLLNET_ENABLE=1 with the SHARP plugin),",
              "congestion and oversubscription above the leaf switches, stragglers, and pipeline or tensor",
              "parallelism (a 70B model across many nodes is usually trained with them). Calibrate on a real",
              "cluster with",
              "`topowise bench comm` inside an srun or torchrun job and trust the measurement over this page.", "",
              *UNVALIDATED, ""]
    return "\n".join(lines)


def _size(nbytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS), figsize=(12, 4.5), sharey=False)
    for ax, model_name in zip(axes, MODELS):
        for name in CLUSTERS:
            xs, ys = [], []
            for nodes in NODES:
                b = best(results[model_name][name][nodes])
                if b is not None:
                    xs.append(nodes)
                    ys.append(b.tokens_per_s_per_gpu)
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(NODES, [str(n) for n in NODES])
        ax.set_xlabel("nodes")
        ax.set_ylabel("predicted tokens/s per GPU (best strategy)")
        ax.set_title(f"{model_name}, micro-batch {MICRO_BATCH} x {SEQ_LEN} per GPU")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle("Predicted, not measured: topowise cost model (python benchmarks/scaleout.py)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--md", default=str(ROOT / "docs" / "multinode.md"))
    parser.add_argument("--png", default=str(ROOT / "research" / "scaleout.png"))
    args = parser.parse_args(argv)
    profile = default_profile()
    results = sweep(profile)
    Path(args.md).parent.mkdir(parents=True, exist_ok=True)
    Path(args.md).write_text(render_markdown(results, profile))
    plot(results, Path(args.png))
    print(f"wrote {args.md} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
