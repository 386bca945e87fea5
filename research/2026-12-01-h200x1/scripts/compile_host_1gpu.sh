#!/usr/bin/env bash
# One-GPU measurements for the compiled cost model and the host speed index, from the repo root:
#   OUT=some/dir bash research/2026-12-01-h200x1/scripts/compile_host_1gpu.sh STAGE [STAGE ...]
# Stages:
#   drift     five launches of a host-bound and a GPU-bound strategy, each with the host index timed
#             alone before it (and inside bench train, before and after the timed steps), the CPU's
#             clock and the GPU's SM clock: does the index follow the host's drift between launches?
#   drift2    eight launches of the host-bound one, --pin-cpus on every second, both indexes alone before each
#   fit       eager and --compile on the two calibration models (8192 tokens and the 128-token host
#             floor): what the compiled terms of the profile are fitted from
#   fit2      the second calibration model compiled (ddp, zero3)
#   heldout   eager and --compile on three configs no fit saw (research/configs/), selective
#             checkpointing compiled on one: what the compiled predictions are checked on
# Records land in $OUT/<stage>/*.jsonl with the commands and times in $OUT/commands.txt.
set -u
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
T() { local limit=$1; shift; echo "### $(date -u +%FT%TZ) $*" | tee -a "$OUT/commands.txt"; timeout "$limit" "$@"; echo "### exit $?" >> "$OUT/commands.txt"; }
B="python3 -m topowise bench train --nproc 1 --device cuda"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; lscpu | grep -E "^(Model name|CPU\(s\)|CPU max MHz|Thread)"; } > "$OUT/machine.txt" 2>&1
C=research/configs
for stage in "$@"; do
  mkdir -p "$OUT/$stage"
  case $stage in
    drift)
      for i in 1 2 3 4 5; do
        { date -u +%FT%TZ; grep MHz /proc/cpuinfo | awk '{s+=$4; n++} END {print "cpu_mhz_mean", s/n}'; cat /proc/loadavg;
          nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader; } >> "$OUT/drift/machine_state.txt" 2>&1
        T 60 python3 -m topowise.measure.host_index --json >> "$OUT/drift/index_alone.jsonl" 2>&1
        T 120 $B --model $C/llama-0.37b.json --strategies zero3,ddp --micro-batch 8 --seq-len 1024 --steps 8 --warmup 3 --out "$OUT/drift/train.jsonl" >> "$OUT/drift/train.txt" 2>&1
      done ;;
    drift2)  # the same, alternating --pin-cpus, with both indexes (CUDA launches, CPU dispatch) alone before each
      for i in 1 2 3 4; do
        for pin in "" "--pin-cpus"; do
          { date -u +%FT%TZ; cat /proc/loadavg; nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader; } >> "$OUT/drift2/machine_state.txt" 2>&1
          T 60 python3 -m topowise.measure.host_index --json --device cuda >> "$OUT/drift2/index_alone.jsonl" 2>&1
          T 60 python3 -m topowise.measure.host_index --json --device cpu >> "$OUT/drift2/index_alone.jsonl" 2>&1
          T 120 $B --model $C/llama-0.37b.json --strategies zero3 --micro-batch 8 --seq-len 1024 --steps 12 --warmup 3 $pin --out "$OUT/drift2/train.jsonl" >> "$OUT/drift2/train.txt" 2>&1
        done
      done ;;
    fit)
      for m in llama3.2-1b qwen2.5-0.5b; do
        for cmp in "" "--compile"; do
          T 300 $B --model $m --strategies ddp,zero2,zero3 --micro-batch 1 --seq-len 8192 --steps 5 --warmup 3 $cmp --out "$OUT/fit/train.jsonl" >> "$OUT/fit/train.txt" 2>&1
          T 300 $B --model $m --strategies ddp,zero2,zero3 --micro-batch 1 --seq-len 128 --steps 8 --warmup 3 $cmp --out "$OUT/fit/train.jsonl" >> "$OUT/fit/train.txt" 2>&1
        done
      done ;;
    heldout)
      for c in "llama-0.37b 8 1024" "llama-0.95b 4 2048" "llama-2.46b-gqa 2 4096"; do set -- $c
        for cmp in "" "--compile"; do
          T 300 $B --model $C/$1.json --strategies ddp,zero3 --micro-batch $2 --seq-len $3 --steps 5 --warmup 3 $cmp --out "$OUT/heldout/train.jsonl" >> "$OUT/heldout/train.txt" 2>&1
        done
      done
      T 300 $B --model $C/llama-0.95b.json --strategies zero3 --micro-batch 4 --seq-len 2048 --steps 5 --warmup 3 --compile --checkpointing selective --out "$OUT/heldout/train.jsonl" >> "$OUT/heldout/train.txt" 2>&1
      ;;
    fit2)  # the second calibration model compiled, ddp and zero3 only (the eager runs are in fit)
      for seq in 8192 128; do
        T 300 $B --model qwen2.5-0.5b --strategies ddp,zero3 --micro-batch 1 --seq-len $seq --steps 5 --warmup 3 --compile --out "$OUT/fit2/train.jsonl" >> "$OUT/fit2/train.txt" 2>&1
      done ;;
    *) echo "unknown stage $stage" >&2 ;;
  esac
done
tar czf "$OUT/results.tar.gz" -C "$OUT" --exclude results.tar.gz . 2>/dev/null
