#!/bin/bash
# one H200: long sequences (16k, 32k tokens) measured by bench train, where attention is a large share; then the kernels timed from the profiler's device events
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
train() {  # model seq extra
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies ddp --micro-batch 1 --seq-len $2 --steps 6 --warmup 2 $3 --out \$OUT/long.jsonl"
  timeout 90 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies ddp --micro-batch 1 --seq-len $2 --steps 6 --warmup 2 $3 --out $R/long.jsonl >> $R/long.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
train llama3.2-1b 16384 ""
train qwen2.5-0.5b 16384 ""
train research/configs/llama-0.95b.json 16384 ""
train research/configs/llama-0.37b.json 16384 ""
train llama3.2-1b 32768 "--checkpointing full"
M=llama3.2-1b,qwen2.5-0.5b,llama3.2-3b,research/configs/llama-0.37b.json,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,2x4096,4x2048,8x1024,1x16384,1x32768 --blocks --out \$OUT/kr"
timeout 200 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,2x4096,4x2048,8x1024,1x16384,1x32768 --blocks --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep -E "^ *ddp|step|error" $R/long.txt | cut -c1-150 | tail -12
grep -v Warn $R/kernel-rates.txt | grep -v _warn_once | tail -40 | cut -c1-140
grep exit $R/commands.txt | tr '\n' ' '
