"""The NCCL_ALGO advice the model gives on a few clusters (docs/nccl-tests.md's table): computed, not measured.

    .venv/bin/python benchmarks/nccl_advice_examples.py
"""

from __future__ import annotations

from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.nccl_advice import advise, allreduce_group, tuner_choice
from topowise.run import Run
from topowise.topology import load_topology

CASES = (
    ("4x hgx-h100-8+ib-ndr", "ddp"),
    ("16x hgx-h100-8+ib-ndr/rack=4,apart=2km,hops=3", "hsdp"),
    ("16x hgx-h100-8+ib-ndr/rack=4,apart=2km,hops=3", "ddp"),
    ("2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm", "ddp"),
    ("32x pcie-l40s-8+eth-25", "ddp"),
)


def main(model_name: str = "llama3.2-1b") -> None:
    model = load_model(model_name)
    print("| cluster | strategy | NCCL's tuner picks | T_ring | T_tree | T_nvlstree | advice |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, strategy in CASES:
        topo = load_topology(name)
        shard = topo.gpus_per_node if strategy == "hsdp" else None
        pred = predict(Run(model, tuple(range(topo.num_gpus)), strategy, shard_group_size=shard), topo)
        a = advise(pred, topo)
        group = allreduce_group(pred, topo)
        picks = sorted({tuner_choice("all_reduce", c.bytes, group, topo, default_profile())
                        for c in pred.time.collectives if c.op == "all_reduce" and c.link == "NET"})
        advice = f"allreduce:{a.algorithm}, {a.gain:.0%}" if a.algorithm else "none"
        nvls = a.forced_s.get("nvlstree")
        print(f"| {name} | {strategy} | {', '.join(picks)} | {a.forced_s['ring'] * 1e3:,.1f} ms | "
              f"{a.forced_s['tree'] * 1e3:,.1f} ms | {'-' if nvls is None else f'{nvls * 1e3:,.1f} ms'} | {advice} |")


if __name__ == "__main__":
    main()
