#!/bin/bash
# one H200: three of the designed calibration's GPU-bound steps (ddp) traced kernel by kernel, to see what they take
# beyond their kernels
source .whl/common.sh
C=.whl/design/configs
trace_() {  # name model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace /tmp/traces/$1 --out \$OUT/train-traced.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace /tmp/traces/$1 --out $R/train-traced.jsonl >> $R/train-traced.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  stamp "python3 benchmarks/trace_kernels.py /tmp/traces/$1/ddp/rank0.trace.json.gz --json \$OUT/kernels-$1.json"
  echo "## $1" >> $R/kernels.txt
  python3 benchmarks/trace_kernels.py /tmp/traces/$1/ddp/rank0.trace.json.gz --json $R/kernels-$1.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
trace_ cal-h2048-l8 $C/cal-h2048-l8/config.json 1 8192
trace_ cal-h1536-l12 $C/cal-h1536-l12/config.json 2 4096
trace_ cal-h1024-l16 $C/cal-h1024-l16/config.json 8 2048
cat $R/kernels.txt
python3 -c "
import json,os
for l in open(os.environ['OUT']+'/train-traced.jsonl'):
    r=json.loads(l); print(r['model'], r['strategy'], round(1e3*r['step_time_s'],1), 'ms', [round(1e3*x,1) for x in r['step_times_s']])"
grep exit $R/commands.txt | tr '\n' ' '
