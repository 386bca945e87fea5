#!/bin/bash
# one H200: DDP bucket ready times (research/2026-12-02-h200x1/scripts/bucket_ready.py) and the untied small-vocabulary models at 2 x 4096
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/buckets $R/smallvocab
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
ready() {  # model mb seq
  stamp "python3 research/2026-12-02-h200x1/scripts/bucket_ready.py --models $1 --micro-batch $2 --seq-len $3 --device cuda --warmup 3 --steps 5 --out \$OUT/buckets"
  timeout 120 python3 research/2026-12-02-h200x1/scripts/bucket_ready.py --models $1 --micro-batch $2 --seq-len $3 --device cuda --warmup 3 --steps 5 --out $R/buckets >> $R/buckets/bucket_ready.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train() {  # part model mb seq strategies
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --out \$OUT/$1/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --micro-batch $3 --seq-len $4 --strategies $5 --steps 6 --warmup 3 --out $R/$1/train.jsonl >> $R/$1/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
ready llama3.2-1b 1 8192
ready qwen2.5-0.5b 1 8192
ready research/configs/llama-0.37b.json 8 1024
ready research/configs/llama-2.46b-gqa.json 2 2048
train smallvocab research/configs/llama-0.37b.json 2 4096 ddp,zero2,zero3
train smallvocab research/configs/llama-0.95b.json 2 4096 ddp,zero2,zero3
tail -n 8 $R/buckets/bucket_ready.txt
grep -E "^(ddp|zero)" $R/smallvocab/train.txt | cut -c1-140
cat $R/commands.txt | grep exit | tr '\n' ' '
