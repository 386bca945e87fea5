#!/usr/bin/env bash
# Model profiles checked against bench train on one GPU (research/2026-12-01-h200x1/model-profile/):
#   OUT=some/dir bash research/2026-12-01-h200x1/scripts/model_profile_1gpu.sh
# For each example model at two batch sizes: `topowise profile` (ddp and zero3), then `bench train
# --nproc 1` of the same callable; predictions are made from the profiles afterwards (no GPU needed):
#   python3 research/2026-12-01-h200x1/scripts/model_profile_compare.py $OUT/mp
# DEVICE=cpu and SMALL=1 run the same steps on the CPU with the tiny builds (a dry run); SKIP_TRAIN=1
# profiles only.
set -u
OUT=${OUT:-gpu-results}
R=$OUT/mp
mkdir -p "$R"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda}
T() { local limit=$1; shift; echo "### $(date -u +%FT%TZ) $*" >> "$R/commands.txt"; local t0; t0=$(date +%s.%N); timeout "$limit" "$@"; local rc=$?; echo "### exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" >> "$R/commands.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; lscpu | grep -E "^(Model name|CPU\(s\))"; } > "$R/machine.txt" 2>&1
if [ "${SMALL:-0}" = 1 ]; then
  CASES="llama:build_tiny:2:32 llama:build_tiny:4:32 vit:build_tiny:4:1 dlrm:build_tiny:16:1"
else
  CASES="llama:build:4:1024 llama:build:16:1024 vit:build:32:1 vit:build:128:1 dlrm:build:2048:1 dlrm:build:16384:1"
fi
for c in $CASES; do
  IFS=: read -r mod fn mb seq <<< "$c"
  M=examples.models.$mod:$fn
  tag=$mod-$mb
  T 150 python3 -m topowise profile --device "$DEVICE" --model "$M" --micro-batch "$mb" --seq-len "$seq" \
      --strategies ddp,zero3 --out "$R/profile-$tag.json" > "$R/profile-$tag.txt" 2>&1
  [ "${SKIP_TRAIN:-0}" = 1 ] || T 200 python3 -m topowise bench train --device "$DEVICE" --nproc 1 --model "$M" --strategies ddp,zero3 \
      --micro-batch "$mb" --seq-len "$seq" --steps 6 --warmup 3 --out "$R/train.jsonl" > "$R/train-$tag.txt" 2>&1
done
python3 - "$R" <<'PY'
import json, pathlib, sys
r = pathlib.Path(sys.argv[1])
print(f"{'case':<22}{'strategy':<8}{'profile step ms':>16}{'bench ms':>10}{'profile wall s':>16}")
train = [json.loads(l) for l in (r / "train.jsonl").read_text().splitlines()] if (r / "train.jsonl").exists() else []
for p in sorted(r.glob("profile-*.json")):
    d = json.loads(p.read_text())
    for s, f in d["strategies"].items():
        b = next((t for t in train if t["model"] == d["model"]["name"] and t["micro_batch"] == d["micro_batch"]
                  and t["strategy"] == s), {})
        step = f.get("step_s")
        print(f"{p.stem[8:]:<22}{s:<8}{(step or 0) * 1e3:>16.2f}{(b.get('step_time_s') or 0) * 1e3:>10.2f}"
              f"{d['wall_s']:>16.1f}")
PY
