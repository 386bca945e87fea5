#!/bin/bash
# one H200: the designed calibration's training shapes (topowise/calibrate/design.py) on one GPU, no communication:
# the GPU-bound runs at their shapes and the host floors at 128 tokens; then four held-out shapes measured again
R=/tmp/r22; mkdir -p $R
export PYTHONPATH=$PWD
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 --version; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "^(Model name|CPU\(s\))") > $R/machine.txt 2>&1
C=.whl/design/configs
bt() {  # file model mb seq strategies steps timeout
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --micro-batch $3 --seq-len $4 --steps $6 --warmup 2 --out \$OUT/$1"
  timeout $7 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --micro-batch $3 --seq-len $4 --steps $6 --warmup 2 --out $R/$1 >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
bt design.jsonl $C/cal-h2048-l8/config.json 1 8192 ddp,zero1,zero2,zero3 6 130
bt design.jsonl $C/cal-h1536-l12/config.json 2 4096 ddp,zero3 6 80
bt design.jsonl $C/cal-h1024-l16/config.json 8 2048 ddp,zero2 6 80
bt design.jsonl $C/cal-h1024-l8/config.json 1 128 ddp,zero1,zero2,zero3 6 50
bt design.jsonl $C/cal-h1024-l16/config.json 1 128 ddp,zero1,zero2,zero3 6 50
bt heldout.jsonl llama3.2-3b 1 4096 ddp,zero3 6 90
bt heldout.jsonl research/configs/llama-0.95b.json 4 2048 ddp,zero3 6 70
(cd /tmp && tar czf $OUT/r22.tar.gz r22); cp $R/design.jsonl $R/heldout.jsonl $R/commands.txt $OUT/ 2>/dev/null
grep -E "ms/step" $R/train.txt
grep exit $R/commands.txt | tr '\n' ' '
