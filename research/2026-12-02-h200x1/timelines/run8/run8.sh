#!/bin/bash
# one H200: DDP bucket ready times with DDP's default buckets (bench train now leaves bucket_cap_mb unset), and
# compiled twins of llama3.2-1b 1 x 8192 (eager and compiled, ddp and zero3, 10 timed steps, two rounds)
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R/buckets $R/compiled
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
ready() {  # model mb seq
  stamp "python3 research/2026-12-02-h200x1/scripts/bucket_ready.py --models $1 --micro-batch $2 --seq-len $3 --device cuda --warmup 3 --steps 5 --out \$OUT/buckets"
  timeout 120 python3 research/2026-12-02-h200x1/scripts/bucket_ready.py --models $1 --micro-batch $2 --seq-len $3 --device cuda --warmup 3 --steps 5 --out $R/buckets >> $R/buckets/bucket_ready.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train() {  # part extra-flags strategies
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model llama3.2-1b --micro-batch 1 --seq-len 8192 --strategies $3 --steps 10 --warmup 3 $2 --out \$OUT/$1/train.jsonl"
  timeout 200 python3 -m topowise bench train --nproc 1 --device cuda --model llama3.2-1b --micro-batch 1 --seq-len 8192 --strategies $3 --steps 10 --warmup 3 $2 --out $R/$1/train.jsonl >> $R/$1/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
ready llama3.2-1b 1 8192
ready qwen2.5-0.5b 1 8192
ready research/configs/llama-0.95b.json 4 2048
train compiled "" ddp,zero3
train compiled --compile ddp,zero3
train compiled "" ddp,zero3
train compiled --compile ddp,zero3
tail -n 4 $R/buckets/bucket_ready.txt
grep -E "^(ddp|zero)" $R/compiled/train.txt | cut -c1-140
cat $R/commands.txt | grep exit | tr '\n' ' '
