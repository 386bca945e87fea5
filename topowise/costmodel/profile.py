"""Profile: the cost model's tunable parameters.

The defaults are default_profile.json beside this file, a profile in the format `calibrate` writes: every value
with a `sources` entry saying the run, command or record it came from. How the defaults were derived, and the fits
they replaced: docs/calibration.md ("The default profile", "Fit history").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from topowise.errors import UsageError

FORMAT = "topowise.profile"
VERSION = 1
ELEMENTWISE_FORMS = ("kernels", "saved-bytes")  # Profile.elementwise_form
GEMM_FORMS = ("tiles", "one-rate")  # Profile.gemm_form
ATTENTION_FORMS = ("thread-blocks", "sequence")  # Profile.attention_form
LINK_CLASSES = ("NV", "PCIe")  # the link classes comm_efficiency and latency_s are keyed by
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
HOST_FALLBACK = {"hsdp": "zero3"}  # hsdp runs FSDP2's code with zero3's resharding
COMPILED_HOST_FALLBACK = {"zero1": "ddp"}  # compiled blocks under DDP's hooks; no compiled zero1 was measured
ATTENTION_TILE_ROWS = 128  # query rows per thread block of the flash kernels

DEFAULT_PROFILE_PATH = Path(__file__).with_name("default_profile.json")


def _read_default(path: Path = DEFAULT_PROFILE_PATH) -> dict[str, Any]:
    """The default profile's fields as written in the package's data file."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


_DEFAULT = _read_default()
_HOST = _DEFAULT["host_s_per_layer"]

# The default values some callers name on their own (each one's source: _DEFAULT["sources"])
ATTENTION_EFFICIENCY: dict[str, float] = dict(_DEFAULT["attention_efficiency"])
ATTENTION_SEQ_OFFSET: float = _DEFAULT["attention_seq_offset"]
ATTENTION_BLOCK_OFFSET: float = _DEFAULT["attention_block_offset"]
CHECKPOINTING_HOST_S_PER_LAYER: dict[str, float] = {
    k: v for k, v in _HOST.items() if k.startswith(("checkpoint/", "selective-op/"))}
DEEPSPEED_HOST_S_PER_LAYER: dict[str, float] = {k: v for k, v in _HOST.items() if k.startswith("deepspeed/")}
DEEPSPEED_HOST_S_PER_STEP: dict[str, float] = dict(_DEFAULT["host_s_per_step"])
# A profile of attention_form "sequence" without its own values is read with the sequence form's fit:
# e by head dim, T0 (six models at 8192 tokens, research/2026-12-02-h200x1/kernels/run16, rms 3.7%)
SEQUENCE_FORM_EFFICIENCY: dict[str, float] = {"64": 0.448, "128": 0.593}
SEQUENCE_FORM_OFFSET = 900.0


def _default_dict(name: str) -> Any:
    """A field's default: a fresh copy of the data file's table."""
    return field(default_factory=lambda: dict(_DEFAULT[name]))


@dataclass(frozen=True)
class Profile:
    """Tunable parameters; `sources[name]` says where each value came from."""

    # achieved / datasheet bf16 peak: the matmuls' best (gemm_form; all FLOPs if no attention term)
    compute_efficiency: float = _DEFAULT["compute_efficiency"]
    # achieved / datasheet fp8 dense peak of the fp8 GEMMs (Run.precision "fp8"), in the sense of compute_efficiency
    fp8_compute_efficiency: float = _DEFAULT["fp8_compute_efficiency"]
    # what compute_efficiency is the rate of: "tiles", a GEMM that fills every wave of its tiles (the block Linears
    # reach a share of it by their shape: gemm.py); "one-rate", every matmul (a file without gemm_form is read so)
    gemm_form: str = _DEFAULT["gemm_form"]
    # the causal attention's achieved fraction of the peak by head dim ("64" -> e), x T / (T + attention_seq_offset)
    # x W / (W + attention_block_offset), W its thread blocks; empty: attention at compute_efficiency like the matmuls
    attention_efficiency: dict[str, float] = _default_dict("attention_efficiency")
    attention_seq_offset: float = _DEFAULT["attention_seq_offset"]
    attention_block_offset: float = _DEFAULT["attention_block_offset"]
    # "thread-blocks": the form above; "sequence": e T / (T + T0) (a file without attention_form is read so)
    attention_form: str = _DEFAULT["attention_form"]
    hbm_efficiency: float = _DEFAULT["hbm_efficiency"]  # achieved / datasheet HBM bandwidth, memory-bound passes
    comm_efficiency: dict[str, float] = _default_dict("comm_efficiency")  # "NV/all_reduce" -> busbw / line rate
    latency_s: dict[str, float] = _default_dict("latency_s")  # "NV/all_reduce" -> alpha seconds
    overlap: dict[str, float] = _default_dict("overlap")  # strategy -> share of beside-compute comm hidden
    allocator_slack: float = _DEFAULT["allocator_slack"]  # reserved above allocated, fraction of allocated
    # the same for FSDP2 (zero2, zero3, hsdp): the reserved figure (memory.reserved_bytes), not the one `fits` reads
    fsdp_allocator_slack: float = _DEFAULT["fsdp_allocator_slack"]
    cuda_context_bytes: int = _DEFAULT["cuda_context_bytes"]
    memory_headroom: float = _DEFAULT["memory_headroom"]  # fraction of GPU memory left free for `fits`
    peak_flops: float = _DEFAULT["peak_flops"]  # FLOP/s compute_efficiency is relative to; 0: the datasheet bf16 peak
    activation_scale: float = _DEFAULT["activation_scale"]  # multiplies the saved-activation bytes of memory.py
    # bytes at the memory-bound rate per byte the blocks' elementwise kernels move (elementwise.py)
    activation_traffic: float = _DEFAULT["activation_traffic"]
    # the same with every block compiled (torch.compile): Inductor's fused kernels
    compiled_activation_traffic: float = _DEFAULT["compiled_activation_traffic"]
    # what the two traffics multiply: "kernels", the bytes the elementwise kernels move; "saved-bytes", the bytes
    # the blocks save for backward (a file with activation_traffic and no elementwise_form is read so)
    elementwise_form: str = _DEFAULT["elementwise_form"]
    # host (Python) seconds per block to issue a phase (forward, backward, optimizer), "strategy/phase"; also
    # "compiled/strategy/phase", "checkpoint/phase" and "selective-op/phase" (what checkpointing adds),
    # "deepspeed/strategy/phase". A phase takes max(host, GPU) (step.py).
    host_s_per_layer: dict[str, float] = _default_dict("host_s_per_layer")
    # host seconds per step, whatever the blocks, "engine/strategy/phase": DeepSpeed's optimizer step
    host_s_per_step: dict[str, float] = _default_dict("host_s_per_step")
    # seconds the first step of a compiled run takes over a steady one, paid once per launch (not in the step)
    compile_s: float = _DEFAULT["compile_s"]
    # how much faster or slower the host may run than its terms say: a host-bound step is a range (step.py)
    host_spread: float = _DEFAULT["host_spread"]
    # op -> an 8-GPU NVSwitch ring's achieved fraction over the 2-GPU one (comm.py; ops not named: 1)
    nvswitch_ring_scale: dict[str, float] = _default_dict("nvswitch_ring_scale")
    # NVLink SHARP all-reduce (NVSwitch gen 3+): achieved fraction of its traffic bound, latency, on/off
    nvls_efficiency: float = _DEFAULT["nvls_efficiency"]
    nvls_latency_s: float = _DEFAULT["nvls_latency_s"]
    nvls_enabled: bool = _DEFAULT["nvls_enabled"]  # False: NCCL_NVLS_ENABLE=0
    # GB/s one host core encrypts and authenticates, "aes-gcm" / "chacha20" (encryption.py)
    encryption_gbps_per_core: dict[str, float] = _default_dict("encryption_gbps_per_core")
    fingerprint: str = _DEFAULT["fingerprint"]  # "" for the default; calibrate writes machine + date + versions
    sources: dict[str, str] = _default_dict("sources")  # field or "field.key" -> where its value came from

    def host_s(self, strategy: str, phase: str, compiled: bool = False) -> float:
        """Host seconds per block for a strategy's phase (hsdp runs zero3's code, zero1 ddp's when
        compiled; 0 when unknown). Compiled: the "compiled/" terms, else the eager ones."""
        names = (strategy, HOST_FALLBACK.get(strategy))
        keys = [f"compiled/{n}/{phase}" for n in names + (COMPILED_HOST_FALLBACK.get(strategy),)] if compiled else []
        for key in keys + [f"{n}/{phase}" for n in names]:
            value = self.host_s_per_layer.get(key)
            if value is not None:
                return float(value)
        return 0.0

    def deepspeed_host_s(self, strategy: str, phase: str, blocks: int) -> float:
        """Host seconds of a DeepSpeed ZeRO phase: per block x blocks plus per step (hsdp, ZeRO++ hpZ,
        runs zero3's code; 0 when unknown)."""
        key = f"deepspeed/{HOST_FALLBACK.get(strategy, strategy)}/{phase}"
        return float(self.host_s_per_layer.get(key, 0.0)) * blocks + float(self.host_s_per_step.get(key, 0.0))

    def attention_rate(self, head_dim: int, seq_len: int, peak: float, batch: int, heads: int) -> float | None:
        """FLOP/s of the causal attention's counted FLOPs (flops.py), timed alone, at this head dim, sequence,
        micro-batch and query heads: the measured efficiency of the nearest head dims, linear between them and held
        beyond, x T / (T + T0), and for attention_form "thread-blocks" x W / (W + W0), W = batch x heads x
        ceil(T / 128); None without an attention term (attention then runs at compute_efficiency)."""
        if not self.attention_efficiency:
            return None
        points = sorted((int(k), float(v)) for k, v in self.attention_efficiency.items())
        below = [p for p in points if p[0] <= head_dim] or points[:1]
        above = [p for p in points if p[0] >= head_dim] or points[-1:]
        (d0, e0), (d1, e1) = below[-1], above[0]
        e = e0 if d1 == d0 else e0 + (e1 - e0) * (head_dim - d0) / (d1 - d0)
        rate = peak * e * seq_len / (seq_len + self.attention_seq_offset)
        if self.attention_form == "thread-blocks":
            blocks = batch * heads * math.ceil(seq_len / ATTENTION_TILE_ROWS)
            rate *= blocks / (blocks + self.attention_block_offset)
        return rate

    def comm(self, link: str, op: str) -> tuple[float, float]:
        """(achieved fraction of line rate, latency seconds) for an op on a link class."""
        key = f"{link}/{op}"
        if key not in self.comm_efficiency:
            key = f"PCIe/{op}"  # an unknown class (network): the slowest one we know
        return self.comm_efficiency[key], self.latency_s[key]

    def to_dict(self) -> dict:
        return dict(asdict(self), format=FORMAT, version=VERSION)

    @classmethod
    def from_dict(cls, data: dict, where: str = "JSON") -> Profile:
        if data.get("format", FORMAT) != FORMAT:
            raise UsageError(f"{where} is not a topowise profile (no \"format\": \"{FORMAT}\")")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"format", "version"})
        if unknown:
            raise UsageError(f"{where}: unknown profile field(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        base = cls()
        if "compute_efficiency" in data and "attention_efficiency" not in data:
            base = replace(base, attention_efficiency={})  # fitted with one rate for all FLOPs: read so
        if "attention_efficiency" in data and "attention_form" not in data:
            base = replace(base, attention_form="sequence", attention_efficiency=dict(SEQUENCE_FORM_EFFICIENCY),
                           attention_seq_offset=SEQUENCE_FORM_OFFSET)  # fitted with the sequence form: read so
        if data.get("attention_form", "thread-blocks") not in ATTENTION_FORMS:
            raise UsageError(f"{where}: attention_form must be one of {', '.join(ATTENTION_FORMS)}, "
                             f"not {data['attention_form']!r}")
        if "activation_traffic" in data and "elementwise_form" not in data:
            base = replace(base, elementwise_form="saved-bytes")  # fitted per saved byte: read so
        if "compute_efficiency" in data and "gemm_form" not in data:
            base = replace(base, gemm_form="one-rate")  # fitted with one rate for every matmul: read so
        if data.get("gemm_form", "tiles") not in GEMM_FORMS:
            raise UsageError(f"{where}: gemm_form must be one of {', '.join(GEMM_FORMS)}, not {data['gemm_form']!r}")
        if data.get("elementwise_form", "kernels") not in ELEMENTWISE_FORMS:
            raise UsageError(f"{where}: elementwise_form must be one of {', '.join(ELEMENTWISE_FORMS)}, "
                             f"not {data['elementwise_form']!r}")
        values: dict[str, Any] = {}
        for name in known & set(data):
            default = getattr(base, name)
            if name == "attention_efficiency":  # one measured set, taken whole ({}: one rate for all FLOPs)
                values[name] = {str(k): float(v) for k, v in data[name].items()}
            elif isinstance(default, dict):
                values[name] = dict(default, **data[name])  # a partial profile keeps the other defaults
            elif isinstance(default, bool):
                if not isinstance(data[name], bool):
                    raise UsageError(f"{where}: {name} must be true or false, not {data[name]!r}")
                values[name] = data[name]
            else:
                values[name] = type(default)(data[name])
        return replace(base, **values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def default_profile() -> Profile:
    return Profile()


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read profile ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a profile (binary, not JSON text); give the JSON file "
                         "`topowise calibrate` wrote") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:  # the parser recurses per level
        raise UsageError(f"{path}: not a profile (JSON nested too deeply)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a profile is a JSON object")
    return Profile.from_dict(data, str(path))
