"""Prices and the cost per million tokens (topowise.prices): the arithmetic, the defaults, the flags."""

import pytest

from topowise.errors import UsageError
from topowise.prices import (
    GPU_HOUR_USD,
    NIC_LIST_USD,
    Prices,
    job_cost,
    network_node_hour_usd_default,
    parse_prices,
)


def test_cost_per_million_tokens_adds_gpu_and_network_hours():
    cost = job_cost(Prices(2.0, {"ib-ndr": 1.0}), gpu_name="NVIDIA H100 80GB HBM3", gpus=16, nodes=2,
                    network_kind="ib-ndr", nics_per_node=8, tokens_per_s=10_000)
    # 16 GPUs at 2 USD and 2 nodes at 1 USD: 34 USD an hour, for 36 M tokens an hour
    assert cost.usd_per_hour == pytest.approx(34.0)
    assert cost.usd_per_million_tokens == pytest.approx(0.9444, rel=1e-4)
    assert (cost.gpu_price, cost.network_price) == ("given", "given")
    faster = job_cost(Prices(2.0, {"ib-ndr": 1.0}), gpu_name="NVIDIA H100 80GB HBM3", gpus=16, nodes=2,
                      network_kind="ib-ndr", nics_per_node=8, tokens_per_s=20_000)
    assert faster.usd_per_hour == cost.usd_per_hour  # the hour costs the same; its tokens are twice as many
    assert faster.usd_per_million_tokens == pytest.approx(cost.usd_per_million_tokens / 2)


def test_default_network_price_is_the_nic_list_price_amortised():
    price = network_node_hour_usd_default
    # the documented example: 8 ConnectX-7 (NDR) per node come to about a dollar per node-hour
    assert price("ib-ndr", 8) == pytest.approx(0.998, abs=5e-4)
    for kind in NIC_LIST_USD:  # a node pays per NIC: none, one, eight
        assert price(kind, 0) == 0.0 and price(kind, 8) == pytest.approx(8 * price(kind, 1))
    # the NIC sets the price, not the protocol run over it; a faster NIC costs no less
    assert price("ib-ndr", 1) == price("roce-400", 1) == price("eth-400", 1)
    for family in (("eth-1", "eth-10", "eth-25", "eth-50", "eth-100", "eth-200", "eth-400", "eth-800"),
                   ("roce-100", "roce-200", "roce-400"), ("ib-hdr", "ib-ndr", "ib-xdr")):
        prices = [price(kind, 1) for kind in family]
        assert prices == sorted(prices), family
    assert price("eth-1", 8) == price("eth-10", 8) == 0.0 < price("eth-25", 1)  # ports on the board are not bought
    assert price("fddi", 1) is None
    assert all(row.source for row in [*GPU_HOUR_USD.values(), *NIC_LIST_USD.values()])
    # a job across nodes takes the default when the user gives none, and the user's price when given
    default = job_cost(Prices(), gpu_name="H100", gpus=16, nodes=2, network_kind="ib-ndr", nics_per_node=8,
                       tokens_per_s=1000)
    assert (default.network_node_hour_usd, default.network_price) == (price("ib-ndr", 8), "default")
    given = job_cost(Prices(network_all_usd=3.0), gpu_name="H100", gpus=16, nodes=2, network_kind="ib-ndr",
                     nics_per_node=8, tokens_per_s=1000)
    assert given.usd_per_hour - default.usd_per_hour == pytest.approx(2 * (3.0 - price("ib-ndr", 8)))


def test_one_node_pays_no_network_and_unknown_prices_stay_unknown():
    one = job_cost(Prices(), gpu_name="H100", gpus=8, nodes=1, network_kind=None, nics_per_node=8,
                   tokens_per_s=1000)
    assert one.network_node_hour_usd == 0.0 and one.usd_per_hour == pytest.approx(8 * GPU_HOUR_USD["H100"].usd)
    unknown = job_cost(Prices(), gpu_name="L40S", gpus=8, nodes=2, network_kind="eth-100", nics_per_node=1,
                       tokens_per_s=1000)
    assert unknown.gpu_price == "unknown" and unknown.usd_per_million_tokens is None


def test_price_flags():
    assert parse_prices("2.5", "ib-ndr=1.1, eth-100=0.2") == Prices(2.5, {"ib-ndr": 1.1, "eth-100": 0.2})
    assert parse_prices(None, "0.7").network_node_hour("eth-100", 1) == (0.7, "given")
    for gpu, net in (("-1", None), ("abc", None), (None, "ib-ndr:1"), (None, "ib-ndr=x")):
        with pytest.raises(UsageError):
            parse_prices(gpu, net)
