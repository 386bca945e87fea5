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


def socket_capped(network: str) -> bool:
    """Whether NCCL's socket transport, not the line, sets this network's GB/s (Ethernet without RDMA above
    ~40G: 2 connections per NIC x one thread's ~2 GB/s; hardware.socket_busbw_gbps)."""
    import re

    from topowise import hardware

    kind = hardware.NETWORKS.get(re.sub(r"x\d+$", "", network))
    return (kind is not None and kind.transport == "socket"
            and kind.busbw_gbps < 0.99 * kind.line_gbps * hardware.TCP_PAYLOAD_FRACTION)  # the catalog rounds


SOCKET_CAP_NOTE = ("socket cap: Ethernet without RDMA runs NCCL's socket transport, whose default (2 connections "
                   "per NIC, one thread each at about 2 GB/s) moves about 4 GB/s per NIC whatever the line rate; "
                   "NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD raise it (docs/networks.md)")


def with_socket_cap(headers: list[str], rows: list[list[str]]) -> tuple[list[list[str]], bool]:
    """The report's what-if rows with "(socket cap)" beside the GB/s of a network NCCL's socket transport
    caps, and whether any was; a table without network and GB/s/node columns unchanged."""
    if "network" not in headers or "GB/s/node" not in headers:
        return rows, False
    name, gbps = headers.index("network"), headers.index("GB/s/node")
    out, capped = [], False
    for row in rows:
        if socket_capped(str(row[name])):
            row = [*row[:gbps], f"{row[gbps]} (socket cap)", *row[gbps + 1:]]
            capped = True
        out.append(row)
    return out, capped
