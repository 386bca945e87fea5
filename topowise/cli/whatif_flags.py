"""The what-if network flags of plan, predict and study: --network and the prices."""

from __future__ import annotations

import argparse


def add_whatif_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--network", metavar="A,B,...",
                        help="what-if: the same job on each of these networks between the nodes, side by side "
                             "(e.g. ib-ndr,roce-400,eth-100,eth-10; a cluster topology only)")
    parser.add_argument("--gpu-hour-usd", metavar="USD",
                        help="price of one GPU-hour for the cost per million tokens (default: a public on-demand "
                             "list price for the GPU model, docs/sources.md)")
    parser.add_argument("--network-node-hour-usd", metavar="NET=USD,...",
                        help="price of one node's network per hour, per network (ib-ndr=1.1,eth-100=0.2) or one "
                             "number for all (default: NIC list prices amortised over 4 years, docs/sources.md)")


def prices_from_args(args: argparse.Namespace):
    """Prices from the flags (the defaults where a flag is absent), checked against the known networks."""
    from topowise.prices import parse_prices
    from topowise.whatif import check_prices_networks

    prices = parse_prices(getattr(args, "gpu_hour_usd", None), getattr(args, "network_node_hour_usd", None))
    check_prices_networks(prices)
    return prices
