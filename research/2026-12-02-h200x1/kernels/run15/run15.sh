#!/bin/bash
# one H200: every matmul and the attention of six models timed alone at the shapes the records ran, and one whole block (profiler kernel time)
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
M=llama3.2-1b,qwen2.5-0.5b,llama3.2-3b,research/configs/llama-0.37b.json,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json
S=1x8192,2x4096,4x2048,8x1024,2x2048,1x4096,1x2048
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes $S --blocks --out \$OUT/kr"
timeout 500 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes $S --blocks --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -46 $R/kernel-rates.txt | cut -c1-160
grep exit $R/commands.txt | tr '\n' ' '
