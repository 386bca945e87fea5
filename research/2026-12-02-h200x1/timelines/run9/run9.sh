#!/bin/bash
# one H200: held-out compiled twins on the changed bench transformer (configs no fit saw), eager then compiled
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/heldout
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
train() {  # model mb seq extra
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --micro-batch $2 --seq-len $3 --strategies ddp,zero3 --steps 8 --warmup 3 $4 --out \$OUT/heldout/train.jsonl"
  timeout 200 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --micro-batch $2 --seq-len $3 --strategies ddp,zero3 --steps 8 --warmup 3 $4 --out $R/heldout/train.jsonl >> $R/heldout/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train research/configs/llama-0.95b.json 4 2048 ""
train research/configs/llama-0.95b.json 4 2048 --compile
train research/configs/llama-2.46b-gqa.json 2 2048 ""
train research/configs/llama-2.46b-gqa.json 2 2048 --compile
grep -E "^(ddp|zero)" $R/heldout/train.txt | cut -c1-140
cat $R/commands.txt | grep exit | tr '\n' ' '
