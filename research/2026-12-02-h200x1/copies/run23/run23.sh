#!/bin/bash
# one H200: DeepSpeed ZeRO-1/2/3 of llama3.2-1b untraced, at 1 x 8192 and at the 128-token host floor
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "^(Model name|CPU\(s\))") > $R/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl > /dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
for seq in 8192 128; do
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --engine deepspeed --model llama3.2-1b --strategies zero1,zero2,zero3 --micro-batch 1 --seq-len $seq --steps 6 --warmup 3 --out \$OUT/deepspeed.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --engine deepspeed --model llama3.2-1b --strategies zero1,zero2,zero3 --micro-batch 1 --seq-len $seq --steps 6 --warmup 3 --out $R/deepspeed.jsonl >> $R/deepspeed.txt 2>&1; echo "### exit $?" >> $R/commands.txt
done
grep -E "ms/step|pred ms|zero" $R/deepspeed.txt | head -20
