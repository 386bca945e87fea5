#!/bin/bash
# one H200: explicit head_dim and Qwen3's q/k norms, unseen configs: saved bytes per block, then whole steps
source .whl/common.sh
Q=research/configs/qwen3-0.6b.json; N=research/configs/mistral-nemo-l8.json
for ddp in "" "--ddp"; do
  stamp "python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models $Q,$N --shapes 2x2048 --modes eager,compiled --setting model $ddp --layers 2 --out \$OUT/sb$ddp"
  timeout 240 python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models $Q,$N --shapes 2x2048 --modes eager,compiled --setting model $ddp --layers 2 --out $R/sb$ddp > $R/saved_bytes$ddp.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  tail -n 9 $R/saved_bytes$ddp.txt
done
tr_ $Q ddp,zero2,zero3 4 4096 ""
tr_ $Q ddp,zero2 4 4096 "--compile"
tr_ $N ddp,zero2,zero3 2 4096 ""
tr_ $N ddp 2 4096 "--compile"
table
stamp "python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_head_dim_gpu.py"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_head_dim_gpu.py > $R/gpu_test.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -n 3 $R/gpu_test.txt
