#!/bin/bash
# one H200: the changed bench transformer, eager; fit set (calibrate's one-GPU shapes) and held-out shapes
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/fit $R/heldout
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
train() {  # part model mb seq strategies
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --out \$OUT/$1/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --out $R/$1/train.jsonl >> $R/$1/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train fit qwen2.5-0.5b 1 8192 ddp,zero2,zero3
train fit llama3.2-1b 1 128 ddp,zero2,zero3
train fit qwen2.5-0.5b 1 128 ddp,zero2,zero3
train heldout llama3.2-3b 1 4096 ddp,zero3
train heldout research/configs/llama-0.37b.json 8 1024 ddp,zero3
train heldout research/configs/llama-2.46b-gqa.json 2 2048 ddp,zero3
grep -E "^(ddp|zero)" $R/fit/train.txt $R/heldout/train.txt | cut -c1-120
