#!/usr/bin/env bash
# One H100: bench train (eager, bf16 autocast, no checkpointing, one GPU) at llm-foundry's MPT shapes and one
# Llama shape; each command with its UTC start and exit status in $OUT/commands.txt. From the repository root:
#   OUT=dir bash research/2026-12-05-h100x1-mpt/run.sh          # ddp (autocast), then the table
#   OUT=dir bash research/2026-12-05-h100x1-mpt/run.sh fsdp     # the MPT shapes under FSDP2's bf16 policy
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
C=research/2026-12-05-h100x1-mpt/configs
T() { echo "### $(date -u +%FT%TZ) $*" | tee -a "$OUT/commands.txt"; timeout 300 "$@"; echo "### exit $?" >> "$OUT/commands.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$OUT/machine.txt" 2>&1
if [ "${1:-}" = fsdp ]; then
  for c in "mpt-350m 16" "mpt-760m 12" "mpt-1b 8" "mpt-3b 2"; do set -- $c
    T python3 -m topowise bench train --model $C/$1.json --strategies zero2,zero3 --micro-batch $2 --seq-len 2048 \
      --out "$OUT/train.jsonl" > "$OUT/$1-mb$2-fsdp.txt" 2>&1
  done
else
for c in "mpt-350m 16" "mpt-760m 12" "mpt-1b 8" "mpt-3b 2"; do set -- $c
  T python3 -m topowise bench train --model $C/$1.json --strategies ddp --micro-batch $2 --seq-len 2048 \
    --out "$OUT/train.jsonl" > "$OUT/$1-mb$2.txt" 2>&1
done
T python3 -m topowise bench train --model $C/mpt-1b.json --strategies ddp --micro-batch 8 --seq-len 2048 --compile \
  --out "$OUT/train.jsonl" > "$OUT/mpt-1b-mb8-compile.txt" 2>&1
T python3 -m topowise bench train --model llama3.2-1b --strategies ddp --micro-batch 2 --seq-len 4096 \
  --out "$OUT/train.jsonl" > "$OUT/llama3.2-1b-mb2.txt" 2>&1
fi
nvidia-smi --query-gpu=name,power.draw,clocks.sm,temperature.gpu --format=csv > "$OUT/after.txt" 2>&1
python3 - "$OUT/train.jsonl" <<'PY'
import json, sys
print(f"{'model':<28}{'strategy':>9}{'mb':>4}{'compile':>8}{'status':>8}{'step ms':>9}{'pred ms':>9}{'err':>8}{'tok/s':>9}{'GiB':>6}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") != "train": continue
    p = r.get("predicted") or {}
    s, ps = r.get("step_time_s"), p.get("step_time_s")
    err = f"{ps / s - 1:+.1%}" if s and ps else "-"
    print(f"{r['model'][-26:]:<28}{r['strategy']:>9}{r.get('micro_batch', 0):>4}{str(r.get('compile')):>8}{r.get('status', '?'):>8}"
          f"{(s or 0) * 1e3:>9.1f}{(ps or 0) * 1e3:>9.1f}{err:>8}{r.get('tokens_per_s_per_gpu') or 0:>9.0f}"
          f"{(r.get('peak_memory_bytes') or 0) / 2**30:>6.1f}")
PY
