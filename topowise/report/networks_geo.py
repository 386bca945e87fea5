"""Questions 3 and 4 of report/networks.py: racks tens of metres apart, and regions joined by an
encrypted WAN. Both read the cluster's layout and region attributes (topology/cluster.py names:
"16x hgx-h100-8+ib-ndr/rack=4,apart=100m,hops=3" and "2x (2x hgx-h100-8+ib-ndr) + wan-...")."""

from __future__ import annotations

from topowise.prices import Prices
from topowise.report.answer import Answer

Q3_NODE, Q3_NODES, Q3_PER_RACK, Q3_NETWORK = "hgx-h100-8", 8, 2, "ib-ndr"
Q3_DISTANCES_M = (0, 10, 30, 100, 300)
Q3_HOPS = 3  # leaf, spine, leaf between racks
Q4_REGION = "2x hgx-h100-8+ib-ndr"  # each region: 2 nodes
Q4_WAN = "wan-100gbit-30ms"
# (cipher, host cores that encrypt): the default 8 cores, and one core, where the cipher can bind
Q4_SETUPS = (("none", 8), ("aes-gcm", 8), ("chacha20", 8), ("tls", 8), ("aes-gcm", 1), ("chacha20", 1), ("tls", 1))
WAN_SHARE = 0.10


def _plan(model, topo, *, seq_len, micro_batch, profile, prices=None, wan_share=WAN_SHARE):
    from topowise.planner.search import plan

    return plan(model, topo, num_gpus=topo.num_gpus, micro_batches=(micro_batch,), seq_len=seq_len,
                profile=profile, top=1, wan_share=wan_share)


def _label(p) -> str:
    if p is None:
        return "nothing fits"
    return p.strategy + (f" ({p.shard_group_size}/group)" if p.shard_group_size else "")


def racks_apart(models, *, seq_len: int, micro_batch: int, profile=None):
    from topowise.costmodel.predict import predict
    from topowise.topology.cluster import load_cluster

    base = load_cluster(f"{Q3_NODES}x {Q3_NODE}+{Q3_NETWORK}")
    layouts = [("one rack", base)] + [
        (f"{d} m", load_cluster(f"{Q3_NODES}x {Q3_NODE}+{Q3_NETWORK}/rack={Q3_PER_RACK},apart={d}m,hops={Q3_HOPS}"))
        for d in Q3_DISTANCES_M]
    sentences, tables, values = [], [], {}
    headers = ["racks", "added per network hop us (farthest)", "strategy", "step ms", "tokens/s",
               "tokens/s vs one rack"]
    for model in models:
        rows, vals, ref = [], [], None
        best = _plan(model, base, seq_len=seq_len, micro_batch=micro_batch, profile=profile).best
        for label, cluster in layouts:  # the plan found on one rack, its run placed racks apart
            pred = predict(best.prediction.run, cluster, profile) if best else None
            extra = cluster.hop_extra_us(0, cluster.num_nodes - 1)
            if ref is None:
                ref = pred
            ratio = pred.tokens_per_s / ref.tokens_per_s if pred and ref else None
            rows.append([label, f"{extra:.2f}", _label(best), "-" if pred is None else f"{pred.step_time_s * 1e3:,.1f}",
                         "-" if pred is None else f"{pred.tokens_per_s:,.0f}",
                         "-" if ratio is None else f"{ratio - 1:+.2%}"])
            vals.append({"layout": label, "hop_extra_us": extra, "strategy": best.strategy if best else None,
                         "step_time_s": pred.step_time_s if pred else None,
                         "tokens_per_s": pred.tokens_per_s if pred else None, "vs_one_rack": ratio})
        values[model.name] = vals
        far = vals[-1]
        sentences.append(
            f"{model.name}: racks {Q3_DISTANCES_M[-1]} m apart add {far['hop_extra_us']:.2f} us to a network hop "
            f"between the farthest racks ({Q3_HOPS - 1} more switch hops and the fibre) and change the step by "
            f"{_step_change(far):+.2%}; at {Q3_DISTANCES_M[2]} m, {_step_change(vals[3]):+.2%}"
            + (": microseconds per hop against collectives of milliseconds." if abs(_step_change(far)) < 0.01
               else "."))
        tables.append((f"{model.name} on {Q3_NODES}x {Q3_NODE} over {Q3_NETWORK}, {Q3_PER_RACK} nodes per rack, racks "
                       f"in a row, {Q3_HOPS} switch hops between racks; micro-batch {micro_batch} x {seq_len}",
                       headers, rows))
    return Answer("racks", "What do tens of metres between racks add?", tuple(sentences), tuple(tables),
                  ("fibre 5 ns per metre and a switch hop per hardware.py (docs/sources.md, \"Networks\"); the "
                   "added latency enters every network step of NCCL's ring and tree (costmodel/network.py)",),
                  values)


def _step_change(v) -> float:
    return 1 / v["vs_one_rack"] - 1 if v["vs_one_rack"] else 0.0


def across_regions(models, *, seq_len: int, micro_batch: int, profile=None, prices: Prices | None = None):
    from topowise.costmodel.predict import predict
    from topowise.planner import regions
    from topowise.topology.cluster import load_cluster
    from topowise.whatif import network_wait_s

    one = load_cluster(f"{2 * int(Q4_REGION.split('x')[0])}x {Q4_REGION.split('x ', 1)[1]}")
    setups = [("one region", one)] + [
        (f"{c}, {n} core{'s' if n > 1 else ''}" if c != "none" else "none",
         load_cluster(f"2x ({Q4_REGION}) + {Q4_WAN}-{c}-{n}cores")) for c, n in Q4_SETUPS]
    headers = ["where", "WAN GB/s after encryption", "strategy", "tokens/s", "vs one region", "WAN share",
               f"micro-batches for {WAN_SHARE:.0%}", "tokens/s then"]
    sentences, tables, values = [], [], {}
    for model in models:
        rows, vals, ref, planned = [], [], None, None
        for label, cluster in setups:
            if planned is None or label in ("one region", "none"):  # planned there; encryption reuses the plan
                best = _plan(model, cluster, seq_len=seq_len, micro_batch=micro_batch, profile=profile).best
                planned = best if label == "none" else None
            if best is None:  # nothing fits this model here (a 405B on four nodes)
                pred = None
            elif planned is None or label == "none":
                pred = best.prediction
            else:
                pred = predict(best.prediction.run, cluster, profile)
            if label == "one region":  # the reference, also when nothing fits there
                ref = pred
            cost = regions.wan_cost(pred, cluster, WAN_SHARE) if pred is not None and cluster.wan else None
            rate = _wan_rate(cluster, profile)
            k = cost.micro_batches if cost else None
            then = None
            if cost and k:  # k micro-batches per optimizer step: tokens per step x k over T(k)
                local = cost.step_s - cost.wan_s - cost.optimizer_s
                per_step = k * (local + cost.wan_s - cost.deferrable_s) + cost.optimizer_s + cost.deferrable_s
                then = pred.tokens_per_s * cost.step_s * k / per_step
            ratio = pred.tokens_per_s / ref.tokens_per_s if pred and ref else None
            rows.append([label, "-" if rate is None else f"{rate:,.2f}", _label(best),
                         "-" if pred is None else f"{pred.tokens_per_s:,.0f}",
                         "-" if ratio is None else f"{ratio:.0%}",
                         "-" if cost is None else f"{cost.share:.0%}",
                         "-" if cost is None else (str(k) if k else "not reachable"),
                         "-" if then is None else f"{then:,.0f}"])
            vals.append({"setup": label, "wan_gbps": rate, "strategy": best.strategy if best else None,
                         "shard_group_size": best.shard_group_size if best else None,
                         "tokens_per_s": pred.tokens_per_s if pred else None, "vs_one_region": ratio,
                         "network_wait_fraction": network_wait_s(pred) / pred.step_time_s if pred else None,
                         "wan": cost.to_dict() if cost else None, "tokens_per_s_accumulated": then})
        values[model.name] = vals
        sentences.append(_q4_sentence(model.name, vals))
        tables.append((f"{model.name}: 2 regions of {Q4_REGION} joined by {Q4_WAN} (per region, each way; 30 ms round "
                       f"trip), against the same 4 nodes in one region; micro-batch {micro_batch} x {seq_len}",
                       headers, rows))
    return Answer("regions", "What does training across regions cost once the traffic is encrypted?",
                  tuple(sentences), tuple(tables),
                  ("encryption rate: the profile's AES-GCM and ChaCha20 rate per core (topowise calibrate --only "
                   "encryption measures it on this host) times the cores that encrypt (8 by default), the lesser of "
                   "it and the WAN's rate; micro-batches: gradient accumulation with the cross-region all-reduce "
                   "once per optimizer step (planner/regions.py)",), values)


def _wan_rate(cluster, profile) -> float | None:
    """GB/s per direction a region's WAN traffic moves after encryption (the lesser of line and cipher)."""
    wan = getattr(cluster, "wan", None)
    if wan is None:
        return None
    from topowise.costmodel.encryption import encrypted_gbps

    return min(wan.gbps, encrypted_gbps(wan.cipher, wan.cores, profile))


def _q4_sentence(name: str, vals) -> str:
    one = vals[0]
    rows = {v["setup"]: v for v in vals[1:]}
    plain, worst = rows.get("none"), min(vals[1:], key=lambda v: v["tokens_per_s"] or 0)
    slowest = min((v for v in vals[1:] if v["wan_gbps"]), key=lambda v: v["wan_gbps"], default=None)
    if plain is None or one["tokens_per_s"] is None or plain["tokens_per_s"] is None:
        return f"{name}: not answered (nothing fits)."
    group = f" with a shard group per region ({plain['shard_group_size']} GPUs)" if plain["shard_group_size"] else ""
    text = (f"{name}: across two regions the best plan is {plain['strategy']}{group}, at "
            f"{plain['vs_one_region']:.0%} of one region's tokens/s unencrypted")
    enc = [v for k, v in rows.items() if k != "none" and v["tokens_per_s"]]
    if enc:
        text += ("; encrypted (of one region's tokens/s): "
                 + "; ".join(f"{v['setup']}: {v['vs_one_region']:.0%}" for v in enc))
    if slowest is not None and plain.get("wan_gbps"):
        text += (f" (the WAN moves {plain['wan_gbps']:.1f} GB/s unencrypted, {slowest['wan_gbps']:.1f} GB/s with "
                 f"{slowest['setup']})")
    parts = []
    for v in dict.fromkeys((plain["setup"], worst["setup"])):
        row = rows[v] if v in rows else worst
        k = (row.get("wan") or {}).get("micro_batches")
        if k and row.get("tokens_per_s_accumulated"):
            parts.append(f"{k} {'unencrypted' if v == 'none' else 'with ' + v} ("
                         f"{row['tokens_per_s_accumulated'] / one['tokens_per_s']:.0%} of one region's tokens/s)")
    if parts:
        text += (f". Gradient accumulation (the cross-region all-reduce once per k micro-batches) brings the WAN "
                 f"under {WAN_SHARE:.0%} of the step at k = " + " and ".join(parts))
    return text + "."
