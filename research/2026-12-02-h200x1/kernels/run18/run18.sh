#!/bin/bash
# one H200: a traced step of llama3.2-3b (1 x 4096) and llama3.2-1b (1 x 8192), ddp and zero3, by kernel class (benchmarks/trace_kernels.py)
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)") > $R/machine.txt
tr_() {  # name model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp,zero3 --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace \$OUT/trace-$1 --out \$OUT/trace.jsonl"
  timeout 100 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp,zero3 --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace $R/t-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  for s in ddp zero3; do
    stamp "python3 benchmarks/trace_kernels.py \$OUT/trace-$1/$s/rank0.trace.json.gz --skip 2 --json \$OUT/kernels-$1-$s.json"
    python3 benchmarks/trace_kernels.py $R/t-$1/$s/rank0.trace.json.gz --skip 2 --json $R/kernels-$1-$s.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  done
  rm -rf $R/t-$1
}
tr_ 3b llama3.2-3b 1 4096
tr_ 1b llama3.2-1b 1 8192
cat $R/kernels.txt
grep exit $R/commands.txt | tr '\n' ' '
