#!/bin/bash
# one H200: profiler traces of the changed bench transformer: each phase's GPU time (the forward/backward split)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
tr() {  # name model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp,zero3 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace \$OUT/trace-$1 --out \$OUT/trace.jsonl"
  timeout 200 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp,zero3 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --trace $R/trace-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  rm -f $R/trace-$1/*/*.trace.json.gz
}
tr 1b llama3.2-1b 1 8192
tr 095b research/configs/llama-0.95b.json 4 2048
python3 - <<'PY'
import json, glob, statistics, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/trace-*/*/breakdown.json")):
    b = json.load(open(f)); steps = b["ranks"]["0"]["steps"]
    print(f.split("/r/")[1], {k: round(statistics.median(s["phases"][k]["wall_s"] for s in steps) * 1e3, 1) for k in ("forward", "backward", "optimizer")})
PY
cat $R/commands.txt | grep exit | tr '\n' ' '
