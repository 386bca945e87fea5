"""The what-if network comparison as a table (headers, rows): one row per network, for terminal and report."""

from __future__ import annotations

HEADERS = ["network", "NICs/node", "GB/s/node", "strategy", "GPUs (nodes)", "mb", "AC", "tokens/s", "tokens/s/GPU",
           "network wait", "step ms", "USD/h", "USD/1M tokens"]


def strategy_text(o) -> str:
    if o.strategy is None:
        return "nothing fits"
    return o.strategy + (f" ({o.shard_group_size}/group)" if o.shard_group_size else "")


def rows(outcomes) -> list[list[str]]:
    out = []
    for o in outcomes:
        if o.strategy is None:
            out.append([o.network, str(o.nics_per_node), f"{o.node_gbps:.3g}", "nothing fits"] + ["-"] * 9)
            continue
        cost = o.cost
        out.append([o.network, str(o.nics_per_node), f"{o.node_gbps:.3g}", strategy_text(o), f"{o.gpus} ({o.nodes})",
                    str(o.micro_batch),
                    "on" if o.activation_checkpointing else "off", f"{o.tokens_per_s:,.0f}",
                    f"{o.tokens_per_s_per_gpu:,.0f}", f"{o.network_wait_fraction:.0%}",
                    f"{o.step_time_s * 1e3:,.0f}",
                    "-" if cost is None or cost.usd_per_hour is None else f"{cost.usd_per_hour:,.2f}",
                    "-" if cost is None or cost.usd_per_million_tokens is None
                    else f"{cost.usd_per_million_tokens:,.3f}"])
    return out


def price_notes(outcomes) -> list[str]:
    """Where each price came from, once: defaults are list prices (docs/sources.md), unknown ones say so."""
    notes = []
    gpu = {o.cost.gpu_price for o in outcomes if o.cost}
    if "default" in gpu:
        notes.append("GPU-hour: a public on-demand list price (docs/sources.md); --gpu-hour-usd gives yours")
    if "unknown" in gpu:
        notes.append("no list price for this GPU model: give --gpu-hour-usd for the cost columns")
    unknown = [o.network for o in outcomes if o.cost and o.cost.network_price == "unknown"]
    if unknown:
        notes.append(f"no default network price for {', '.join(unknown)}: give --network-node-hour-usd")
    if any(o.cost and o.cost.network_price == "default" for o in outcomes):
        notes.append("network: NIC list price x NICs x 2 (switch port and cable as much again) over 4 years "
                     "(topowise/prices.py); --network-node-hour-usd gives yours")
    return notes
