#!/bin/bash
# one H200: GPT-2 (124M) at 8 x 1024, eager, ddp and zero2 untraced, ddp traced and read kernel by kernel
source .whl/common.sh
tr_ gpt2 ddp,zero2 8 1024 ""
stamp "python3 -m topowise bench train --nproc 1 --device cuda --model gpt2 --strategies ddp --micro-batch 8 --seq-len 1024 --steps 6 --warmup 2 --trace /tmp/traces/gpt2 --out \$OUT/train-traced.jsonl"
timeout 100 python3 -m topowise bench train --nproc 1 --device cuda --model gpt2 --strategies ddp --micro-batch 8 --seq-len 1024 --steps 6 --warmup 2 --trace /tmp/traces/gpt2 --out $R/train-traced.jsonl > $R/train-traced.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 benchmarks/trace_kernels.py /tmp/traces/gpt2/ddp/rank0.trace.json.gz --json \$OUT/kernels.json"
python3 benchmarks/trace_kernels.py /tmp/traces/gpt2/ddp/rank0.trace.json.gz --json $R/kernels.json > $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 research/2026-12-03-h200x1/scripts/launch_cost.py /tmp/traces/gpt2/ddp/rank0.trace.json.gz"
python3 research/2026-12-03-h200x1/scripts/launch_cost.py /tmp/traces/gpt2/ddp/rank0.trace.json.gz > $R/launch_cost.txt 2>&1; echo "### exit $?" >> $R/commands.txt
table
cat $R/kernels.txt $R/launch_cost.txt
