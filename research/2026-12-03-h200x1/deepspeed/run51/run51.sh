#!/bin/bash
# one H200: llama3.2-1b 1 x 8192, DeepSpeed ZeRO-2 and FSDP2's zero2 traced again, their kernels read phase by phase
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl || exit
source .whl/common.sh
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
for e in deepspeed pytorch; do
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --engine $e --model llama3.2-1b --strategies zero2 --micro-batch 1 --seq-len 8192 --steps 6 --warmup 2 --trace /tmp/traces/$e --out \$OUT/train.jsonl"
  timeout 200 python3 -m topowise bench train --nproc 1 --device cuda --engine $e --model llama3.2-1b --strategies zero2 --micro-batch 1 --seq-len 8192 --steps 6 --warmup 2 --trace /tmp/traces/$e --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  for p in forward backward optimizer; do
    j=""; [ $p != forward ] && j="--json $R/kernels-$e-$p.json"
    stamp "python3 benchmarks/trace_kernels.py /tmp/traces/$e/zero2/rank0.trace.json.gz --phase $p ${j/$R/\$OUT} (printed at the end of train.txt)"
    python3 benchmarks/trace_kernels.py /tmp/traces/$e/zero2/rank0.trace.json.gz --phase $p $j >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  done
done
grep -A7 "GPU ms per step" $R/train.txt | grep -v "^--"
table
