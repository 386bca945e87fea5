"""A block's elementwise work as measured kernel by kernel, beside the cost model's elementwise term.

    python research/2026-12-02-h200x1/scripts/elementwise_check.py [FILE ...]     # default: the one-H200 records of 2026-12-02 and -03

Reads `research/2026-12-02-h200x1/scripts/kernel_rates.py --blocks` records. A block's elementwise time is what its kernels take
beyond its GEMMs and its attention, by kernel name (everything that is not a GEMM or an attention
kernel); under autocast less its weights' casts (to bf16, and the gradients back to fp32) at the rates
step.py charges them per parameter, which the elementwise term does not hold.
Beside it, the model's term (step.block_elementwise): the bytes the block's elementwise kernels move
(costmodel/elementwise.py) x Profile.activation_traffic (compiled: compiled_activation_traffic) at the HBM
rate x hbm_efficiency, with Qwen3's eager q/k norms at what they took alone; under autocast (DDP's fp32
weights) and in bf16 (FSDP2's), eager and (rows of `--compile`) compiled. Prints per model, shape and block:
measured and modelled milliseconds, their ratio, the fraction of the HBM datasheet rate the counted bytes
ran at (forward, backward), and the ratio the saved-bytes term of earlier profiles gave (9.558 per saved byte
eager, 7.5592 compiled: the default profile of 2026-12-02).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from topowise import hardware  # noqa: E402
from topowise.costmodel.elementwise import block_elementwise_bytes, qk_norm_bytes  # noqa: E402
from topowise.costmodel.memory import (  # noqa: E402
    activation_bytes_per_token_per_layer,
    autocast_block_cast_params,
)
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.costmodel.step import CAST_DOWN, CAST_UP, at_rate  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

DEFAULT = [ROOT / "research/2026-12-02-h200x1/kernels/run17/kr/kernel_rates.jsonl",
           ROOT / "research/2026-12-02-h200x1/recompute/run35/kernel_rates.jsonl",
           ROOT / "research/2026-12-03-h200x1/qk-norm/run47/kr/kernel_rates.jsonl"]
SAVED_BYTES_TRAFFIC = {False: 9.558, True: 7.5592}  # the saved-bytes form's defaults of 2026-12-02, compiled or not
NOT_ELEMENTWISE = ("gemm", "nvjet", "cutlass", "sm90_xmma", "fmha", "flash", "cudnn", "attention")


def elementwise(kernels: dict) -> float:
    return sum(t for name, t in kernels.items() if not any(k in name.lower() for k in NOT_ELEMENTWISE))


def model_of(name: str):
    if name.startswith("configs/"):
        name = str(ROOT / "research" / f"{name}.json")
    return load_model(name)


# what step.py charges per parameter for autocast's weight cast and the gradient's cast back, apart from
# the elementwise term: the block's kernels include both
WEIGHT_CAST_BYTES_PER_PARAM = at_rate(CAST_DOWN) + at_rate(CAST_UP)
VARIANTS = (("block", True, False), ("block_bf16", False, False), ("block_compiled", True, True),
            ("block_bf16_compiled", False, True))


def block_rows(record: dict, profile, hbm_peak: float):
    """(label, measured forward s, measured backward s, modelled s, counted forward bytes, counted backward bytes,
    saved-bytes form s) per block variant of one kernel_rates record."""
    model, tokens = model_of(record["model"]), record["tokens"]
    hbm = hbm_peak * profile.hbm_efficiency
    for key, autocast, compiled in VARIANTS:
        if "kernels" not in record.get(key, {}):
            continue
        total, forward = elementwise(record[key]["kernels"]), elementwise(record[key]["forward_kernels"])
        if autocast:  # its weights' casts (to bf16 and the gradients back) are a per-parameter term
            params = autocast_block_cast_params(model)
            forward -= at_rate(CAST_DOWN) * params / hbm
            total -= WEIGHT_CAST_BYTES_PER_PARAM * params / hbm
        fwd, bwd = block_elementwise_bytes(model, autocast, compiled)
        traffic = profile.compiled_activation_traffic if compiled else profile.activation_traffic
        norms = 0.0 if compiled else sum(qk_norm_bytes(model, autocast, profile.hbm_efficiency))
        modelled = (traffic * (fwd + bwd) + norms) * tokens / hbm
        saved = SAVED_BYTES_TRAFFIC[compiled] * activation_bytes_per_token_per_layer(model, autocast=autocast) * tokens
        label = ("autocast" if autocast else "bf16") + (", compiled" if compiled else "")
        yield label, forward, total - forward, modelled, fwd * tokens, bwd * tokens, saved / hbm


def main() -> int:
    files = [Path(f) for f in sys.argv[1:]] or DEFAULT
    profile = default_profile()
    peak = hardware.hbm_bytes_per_s("NVIDIA H200")
    print(f"{'model':<26}{'shape':>8} {'block':<20}{'measured ms':>12}{'model ms':>10}{'ratio':>7}"
          f"{'HBM fraction fwd / bwd':>24}{'saved-bytes ratio':>19}")
    for f in files:
        for line in f.read_text().splitlines():
            r = json.loads(line)
            for label, fwd_s, bwd_s, modelled, fwd_b, bwd_b, saved in block_rows(r, profile, peak):
                measured = fwd_s + bwd_s
                print(f"{r['model'][-26:]:<26}{r['micro_batch']:>3}x{r['seq_len']:<5} {label:<20}"
                      f"{1e3 * measured:>12.3f}{1e3 * modelled:>10.3f}{measured / modelled:>7.2f}"
                      f"{fwd_b / fwd_s / peak:>14.2f} / {bwd_b / bwd_s / peak:.2f}{measured / saved:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
