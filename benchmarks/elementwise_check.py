"""A block's elementwise work as measured kernel by kernel, beside the cost model's elementwise term.

    python benchmarks/elementwise_check.py [FILE ...]     # default: the one-H200 records of 2026-12-02

Reads `benchmarks/kernel_rates.py --blocks` records. A block's elementwise time is what its kernels take
beyond its GEMMs and its attention, by kernel name (everything that is not a GEMM or an attention
kernel); under autocast less its weights' casts (to bf16, and the gradients back to fp32) at the rates
step.py charges them per parameter, which the elementwise term does not hold.
Beside it, the model's term: Profile.activation_traffic x the bytes the block saves for backward
(memory.activation_bytes_per_token_per_layer) x tokens / (HBM rate x hbm_efficiency), under autocast
(DDP's fp32 weights) and in bf16 (FSDP2's), eager and (rows of `--compile`) compiled at
Profile.compiled_activation_traffic. Prints per model, shape and block: measured and modelled
milliseconds, their ratio, and the forward's share of the measured time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from topowise import hardware  # noqa: E402
from topowise.costmodel.memory import (  # noqa: E402
    activation_bytes_per_token_per_layer,
    autocast_block_cast_params,
)
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.costmodel.step import CAST_DOWN, CAST_UP, at_rate  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

DEFAULT = [ROOT / "docs/results/2026-12-02-h200x1/kernels/run17/kr/kernel_rates.jsonl"]
NOT_ELEMENTWISE = ("gemm", "nvjet", "cutlass", "sm90_xmma", "fmha", "flash", "cudnn", "attention")


def elementwise(kernels: dict) -> float:
    return sum(t for name, t in kernels.items() if not any(k in name.lower() for k in NOT_ELEMENTWISE))


def model_of(name: str):
    if name.startswith("configs/"):
        name = str(ROOT / "benchmarks" / f"{name}.json")
    return load_model(name)


# what step.py charges per parameter for autocast's weight cast and the gradient's cast back, apart from
# the elementwise term: the block's kernels include both
WEIGHT_CAST_BYTES_PER_PARAM = at_rate(CAST_DOWN) + at_rate(CAST_UP)
VARIANTS = (("block", True, False), ("block_bf16", False, False), ("block_compiled", True, True),
            ("block_bf16_compiled", False, True))


def main() -> int:
    files = [Path(f) for f in sys.argv[1:]] or DEFAULT
    profile = default_profile()
    hbm = hardware.hbm_bytes_per_s("NVIDIA H200") * profile.hbm_efficiency
    print(f"{'model':<26}{'shape':>8} {'block':<22}{'measured ms':>12}{'model ms':>10}{'ratio':>7}"
          f"{'forward share':>15}")
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            model, tokens = model_of(r["model"]), r.get("tokens")
            for key, autocast, compiled in VARIANTS:
                if "kernels" not in r.get(key, {}):
                    continue
                measured = elementwise(r[key]["kernels"])
                if autocast:  # its weights' casts (to bf16 and the gradients back) are a per-parameter term
                    measured -= WEIGHT_CAST_BYTES_PER_PARAM * autocast_block_cast_params(model) / hbm
                traffic = profile.compiled_activation_traffic if compiled else profile.activation_traffic
                modelled = traffic * activation_bytes_per_token_per_layer(
                    model, autocast=autocast, compiled=compiled) * tokens / hbm
                share = elementwise(r[key]["forward_kernels"]) / measured
                label = ("autocast" if autocast else "bf16") + (", compiled" if compiled else "")
                print(f"{r['model']:<26}{r['micro_batch']:>3}x{r['seq_len']:<5} {label:<22}{1e3 * measured:>12.3f}"
                      f"{1e3 * modelled:>10.3f}{measured / modelled:>7.2f}{share:>15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
