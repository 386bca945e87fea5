#!/bin/bash
# one H200: three steps traced and read kernel by kernel: two narrow configs the shape form prices long
# (smollm2-360m ddp 8x4096, smollm2-135m ddp 16x4096) and a wide one at the same tokens (llama3.2-1b ddp 2x4096)
source .whl/common.sh
C=research/configs
trace_() {  # name model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace /tmp/traces/$1 --out \$OUT/train-traced.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace /tmp/traces/$1 --out $R/train-traced.jsonl >> $R/train-traced.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  stamp "python3 benchmarks/trace_kernels.py /tmp/traces/$1/ddp/rank0.trace.json.gz --json \$OUT/kernels-$1.json"
  echo "## $1" >> $R/kernels.txt
  python3 benchmarks/trace_kernels.py /tmp/traces/$1/ddp/rank0.trace.json.gz --json $R/kernels-$1.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
trace_ smollm2-360m $C/smollm2-360m.json 8 4096
trace_ smollm2-135m $C/smollm2-135m.json 16 4096
trace_ llama3.2-1b llama3.2-1b 2 4096
cat $R/kernels.txt
grep exit $R/commands.txt | tr '\n' ' '
