#!/bin/bash
# one H200: Qwen3's q/k norms under autocast, op by op; Qwen3 and NeMo blocks kernel by kernel (eager, bf16, compiled);
# Qwen3's eager ddp step traced
source .whl/common.sh
Q=research/configs/qwen3-0.6b.json; N=research/configs/mistral-nemo-l8.json
stamp "python3 .whl/norm_probe.py"
timeout 60 python3 .whl/norm_probe.py > $R/norm_probe.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $Q,$N --shapes 1x8192,4x2048 --blocks --compile --out \$OUT/kr"
timeout 300 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $Q,$N --shapes 1x8192,4x2048 --blocks --compile --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $Q --strategies ddp --micro-batch 4 --seq-len 4096 --steps 6 --warmup 2 --trace /tmp/traces/q3 --out \$OUT/train-traced.jsonl"
timeout 120 python3 -m topowise bench train --nproc 1 --device cuda --model $Q --strategies ddp --micro-batch 4 --seq-len 4096 --steps 6 --warmup 2 --trace /tmp/traces/q3 --out $R/train-traced.jsonl > $R/train-traced.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 benchmarks/trace_kernels.py /tmp/traces/q3/ddp/rank0.trace.json.gz --json \$OUT/kernels.json (printed at the end of train-traced.txt)"
python3 benchmarks/trace_kernels.py /tmp/traces/q3/ddp/rank0.trace.json.gz --json $R/kernels.json >> $R/train-traced.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep -v -i warn $R/kernel-rates.txt | tail -12 | cut -c1-150
head -c 2500 $R/norm_probe.txt | tail -c 1500
tail -n 30 $R/train-traced.txt
grep exit $R/commands.txt | tr '\n' ' '
