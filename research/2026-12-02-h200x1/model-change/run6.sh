#!/bin/bash
# one H200: compiled twins of the eager runs of run 4 and run 5 (the changed bench transformer)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/fit $R/heldout
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
train() {  # part model mb seq strategies
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --compile --out \$OUT/$1/train-compiled.jsonl"
  timeout 85 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --compile --out $R/$1/train-compiled.jsonl >> $R/$1/train-compiled.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train fit llama3.2-1b 1 8192 ddp,zero3
train heldout llama3.2-3b 1 4096 zero3
grep -E "^(ddp|zero)" $R/fit/train-compiled.txt $R/heldout/train-compiled.txt | cut -c1-120
