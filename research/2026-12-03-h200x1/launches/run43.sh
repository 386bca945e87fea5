#!/bin/bash
# one H200: traced steps (bench train --trace), read for the launch calls' cost by the GPU's queue depth and the
# host's time in calls that waited for room in the launch queue (research/2026-12-03-h200x1/scripts/launch_cost.py); traces stay here
source .whl/common.sh
C=research/configs
T=/tmp/traces; mkdir -p $T
trace_() {  # name model strategies mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $3 --micro-batch $4 --seq-len $5 --steps 6 --warmup 2 --trace /tmp/traces/$1 --out \$OUT/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $3 --micro-batch $4 --seq-len $5 --steps 6 --warmup 2 --trace $T/$1 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
trace_ narrow-8x2048 $C/llama-deep-narrow.json ddp 8 2048
trace_ narrow-1x128 $C/llama-deep-narrow.json ddp 1 128
trace_ 037b-1x128 $C/llama-0.37b.json ddp 1 128
trace_ 1b-1x128 llama3.2-1b ddp 1 128
trace_ 1b-1x8192 llama3.2-1b ddp 1 8192
stamp "python3 research/2026-12-03-h200x1/scripts/launch_cost.py /tmp/traces/*/ddp/rank0.trace.json.gz --json \$OUT/launch_cost.json"
python3 research/2026-12-03-h200x1/scripts/launch_cost.py $T/*/ddp/rank0.trace.json.gz --json $R/launch_cost.json > $R/launch_cost.txt 2>&1; echo "### exit $?" >> $R/commands.txt
table
cat $R/launch_cost.txt
