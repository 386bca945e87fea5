"""Prices and the cost per million tokens (topowise.prices): the arithmetic, the defaults, the flags."""

import pytest

from topowise.errors import UsageError
from topowise.prices import (
    GPU_HOUR_USD,
    HOURS_PER_YEAR,
    NIC_LIST_USD,
    Prices,
    job_cost,
    network_node_hour_usd_default,
    parse_prices,
)


def test_cost_per_million_tokens_adds_gpu_and_network_hours():
    cost = job_cost(Prices(2.0, {"ib-ndr": 1.0}), gpu_name="NVIDIA H100 80GB HBM3", gpus=16, nodes=2,
                    network_kind="ib-ndr", nics_per_node=8, tokens_per_s=10_000)
    assert cost.usd_per_hour == pytest.approx(16 * 2.0 + 2 * 1.0)
    assert cost.usd_per_million_tokens == pytest.approx(34.0 / 36e6 * 1e6)
    assert (cost.gpu_price, cost.network_price) == ("given", "given")


def test_default_network_price_is_the_nic_list_price_amortised():
    # 8 ConnectX-7 at 2188 USD, with a switch port and cable as much again, over 4 years
    assert network_node_hour_usd_default("ib-ndr", 8) == pytest.approx(8 * 2188 * 2 / (4 * HOURS_PER_YEAR))
    assert network_node_hour_usd_default("eth-100", 1) < network_node_hour_usd_default("ib-ndr", 8)
    assert network_node_hour_usd_default("fddi", 1) is None
    assert all(row.source for row in [*GPU_HOUR_USD.values(), *NIC_LIST_USD.values()])


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
