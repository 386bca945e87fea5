"""Prices: what a GPU-hour and a node's network cost per hour, and the cost per million tokens.

    job USD per hour   = GPUs x GPU-hour price + nodes x network node-hour price
    USD per 1M tokens  = job USD per hour / (tokens/s x 3600) x 1e6

GPU-hour defaults are on-demand list prices per GPU of an 8-GPU cloud instance (docs/sources.md,
"Prices": page, date read). The network is priced as bought hardware, amortised:

    network node-hour  = NICs per node x NIC list price x (1 + PORT_AND_CABLE) / (YEARS x HOURS_PER_YEAR)

e.g. InfiniBand NDR, 8 ConnectX-7 per node: 8 x 2188 x 2 / (4 x 8766) = 0.998 USD per node-hour.
The user's own prices (--gpu-hour-usd, --network-node-hour-usd) replace the defaults; a network or
GPU without a default and without a user price leaves the cost unknown, never a guess.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from topowise.errors import UsageError

HOURS_PER_YEAR = 8766.0  # 365.25 days x 24 h
YEARS = 4.0  # amortisation period of the network hardware (an assumption, stated; the user's prices replace it)
# A switch port and the cable or optics behind each NIC, taken as costing as much as the NIC again:
# an assumption (no switch list price from a primary source is cited), stated so it can be replaced.
PORT_AND_CABLE = 1.0


@dataclass(frozen=True)
class PriceRow:
    usd: float
    source: str


# On-demand USD per GPU-hour (8-GPU instances), matched inside the GPU's name like hardware.gpu_spec.
GPU_HOUR_USD: dict[str, PriceRow] = {
    "H100": PriceRow(3.99, "Lambda on-demand 8x NVIDIA H100 SXM, per GPU-hour: https://lambda.ai/pricing "
                           "(as listed 2026-09-20)"),
    "H200": PriceRow(3.99, "Hyperstack on-demand NVIDIA H200 SXM, per GPU-hour: "
                           "https://www.hyperstack.cloud/gpu-pricing (as listed 2026-08-26)"),
    "A100": PriceRow(2.79, "Lambda on-demand 8x NVIDIA A100 SXM 80 GB, per GPU-hour: https://lambda.ai/pricing "
                           "(as listed 2026-09-20)"),
    "B200": PriceRow(6.69, "Lambda on-demand 8x NVIDIA B200 SXM6, per GPU-hour: https://lambda.ai/pricing "
                           "(as listed 2026-09-20)"),
}

# List price of one NIC of each network (USD), FS.com US NVIDIA NIC listing
# (https://www.fs.com/c/nvidia-ethernet-nics-4014, as listed 2026-09-15).
_CX8_800 = PriceRow(2519.0, "ConnectX-8 VPI 800G OSFP 1-port, $2,519, fs.com (2026-09-15)")
_CX7_400 = PriceRow(2188.0, "ConnectX-7 VPI 400G OSFP 1-port (MCX75310AAS-NEAT), $2,188, fs.com (2026-09-15)")
_CX7_200 = PriceRow(2129.0, "ConnectX-7 VPI 200G QSFP112 2-port, $2,129, fs.com (2026-09-15)")
_CX6_100 = PriceRow(1550.0, "ConnectX-6 Dx 100G QSFP56 2-port, $1,550, fs.com (2026-09-15)")
_CX6_25 = PriceRow(469.0, "ConnectX-6 Lx 25G SFP28 2-port (the 25/50 GbE family), $469, fs.com (2026-09-15)")
_ONBOARD = PriceRow(0.0, "1 and 10 GbE ports come on the server's board: no NIC bought, counted as 0")
NIC_LIST_USD: dict[str, PriceRow] = {
    "ib-xdr": _CX8_800, "eth-800": _CX8_800,
    "ib-ndr": _CX7_400, "roce-400": _CX7_400, "eth-400": _CX7_400,
    "ib-hdr": _CX7_200, "roce-200": _CX7_200, "eth-200": _CX7_200,
    "roce-100": _CX6_100, "eth-100": _CX6_100,
    "eth-50": _CX6_25, "eth-25": _CX6_25,
    "eth-10": _ONBOARD, "eth-1": _ONBOARD,
}


def network_node_hour_usd_default(kind: str, nics_per_node: int) -> float | None:
    """The amortised hardware price of a node's network per hour (see the module docstring); None if unknown."""
    row = NIC_LIST_USD.get(kind)
    if row is None:
        return None
    return nics_per_node * row.usd * (1.0 + PORT_AND_CABLE) / (YEARS * HOURS_PER_YEAR)


def gpu_hour_usd_default(gpu_name: str) -> float | None:
    upper = gpu_name.upper()
    for key in sorted(GPU_HOUR_USD, key=len, reverse=True):
        if key.upper() in upper:
            return GPU_HOUR_USD[key].usd
    return None


@dataclass(frozen=True)
class Prices:
    """The user's prices; None (or a missing network) means: take the default, if there is one."""

    gpu_hour_usd: float | None = None
    network_node_hour_usd: dict[str, float] = field(default_factory=dict)
    network_all_usd: float | None = None  # one price for every network (--network-node-hour-usd 1.2)

    def gpu_hour(self, gpu_name: str) -> tuple[float | None, str]:
        if self.gpu_hour_usd is not None:
            return self.gpu_hour_usd, "given"
        value = gpu_hour_usd_default(gpu_name)
        return value, "default" if value is not None else "unknown"

    def network_node_hour(self, kind: str, nics_per_node: int) -> tuple[float | None, str]:
        if kind in self.network_node_hour_usd:
            return self.network_node_hour_usd[kind], "given"
        if self.network_all_usd is not None:
            return self.network_all_usd, "given"
        value = network_node_hour_usd_default(kind, nics_per_node)
        return value, "default" if value is not None else "unknown"

    def to_dict(self) -> dict:
        return {"gpu_hour_usd": self.gpu_hour_usd, "network_node_hour_usd": dict(self.network_node_hour_usd),
                "network_all_usd": self.network_all_usd}


@dataclass(frozen=True)
class Cost:
    """What a job costs per hour and per million tokens, and where each price came from."""

    gpu_hour_usd: float | None
    network_node_hour_usd: float | None
    usd_per_hour: float | None
    usd_per_million_tokens: float | None
    gpu_price: str  # "given", "default" or "unknown"
    network_price: str

    def to_dict(self) -> dict:
        return {"gpu_hour_usd": self.gpu_hour_usd, "network_node_hour_usd": self.network_node_hour_usd,
                "usd_per_hour": self.usd_per_hour, "usd_per_million_tokens": self.usd_per_million_tokens,
                "gpu_price": self.gpu_price, "network_price": self.network_price}


def job_cost(prices: Prices, *, gpu_name: str, gpus: int, nodes: int, network_kind: str | None,
             nics_per_node: int, tokens_per_s: float) -> Cost:
    """The cost of `gpus` GPUs on `nodes` nodes at `tokens_per_s`; a network of None (one node) costs nothing."""
    gpu, gpu_from = prices.gpu_hour(gpu_name)
    if network_kind is None or nodes < 2:
        net, net_from = 0.0, "none"
    else:
        net, net_from = prices.network_node_hour(network_kind, nics_per_node)
    per_hour = None if gpu is None or net is None else gpus * gpu + nodes * net
    per_million = (per_hour / (tokens_per_s * 3600.0) * 1e6 if per_hour is not None and tokens_per_s > 0
                   else None)
    return Cost(gpu, net, per_hour, per_million, gpu_from, net_from)


# A price per hour past this is a typo: 150x the dearest GPU-hour listed above (B200, 6.69 USD).
MAX_USD_PER_HOUR = 1000.0


def _usd(text: str, flag: str) -> float:
    try:
        value = float(text) if str(text).isascii() else math.nan  # float() would read any script's digits
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a price in USD (e.g. {flag} 2.5)") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{flag}: {text!r} is not a price in USD (e.g. {flag} 2.5)")
    if value > MAX_USD_PER_HOUR:
        raise UsageError(f"{flag} {text}: give at most {MAX_USD_PER_HOUR:g} USD an hour (the dearest list price "
                         "here is under 7; a price past it is a typo)")
    return value


def parse_prices(gpu_hour: str | None, network_node_hour: str | None) -> Prices:
    """--gpu-hour-usd 2.5 and --network-node-hour-usd ib-ndr=1.1,eth-100=0.2 (or one number for every network)."""
    gpu = _usd(gpu_hour, "--gpu-hour-usd") if gpu_hour is not None else None
    if network_node_hour is None:
        return Prices(gpu)
    flag = "--network-node-hour-usd"
    text = network_node_hour.strip()
    if "=" not in text:
        return Prices(gpu, {}, _usd(text, flag))
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = re.fullmatch(r"([A-Za-z0-9.-]+)\s*=\s*(\S+)", part)
        if not match:
            raise UsageError(f"{flag}: {part!r} is not NETWORK=USD (e.g. {flag} ib-ndr=1.1,eth-100=0.2)")
        out[match.group(1)] = _usd(match.group(2), flag)
    return Prices(gpu, out)
