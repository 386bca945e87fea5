#!/bin/bash
# one H200: one block's kernels by name, under autocast (DDP) and in bf16 (FSDP2), six models at 8192 tokens: where the elementwise time goes
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())") > $R/machine.txt
M=llama3.2-1b,qwen2.5-0.5b,llama3.2-3b,research/configs/llama-0.37b.json,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,4x2048 --blocks --out \$OUT/kr"
timeout 240 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,4x2048 --blocks --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep -v Warn $R/kernel-rates.txt | grep -v _warn_once | tail -16 | cut -c1-140
grep exit $R/commands.txt | tr '\n' ' '
