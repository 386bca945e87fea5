#!/bin/bash
# one H200: Qwen3's q/k norms timed in place; whole steps no fit saw (Qwen3-1.7B, eager and compiled; NeMo's block and
# the 0.95B config compiled under FSDP2), predicted by the tree that runs them (predicted-before.txt)
source .whl/common.sh
Q=research/configs/qwen3-1.7b.json; N=research/configs/mistral-nemo-l8.json; L=research/configs/llama-0.95b.json
stamp "python3 .whl/norm_probe2.py"
timeout 120 python3 .whl/norm_probe2.py > $R/norm_probe2.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_ $Q ddp,zero2,zero3 2 4096 ""
tr_ $Q ddp,zero3 2 4096 "--compile"
tr_ $N zero3 2 4096 "--compile"
tr_ $L zero2 4 2048 "--compile"
cat $R/norm_probe2.txt | grep heads
table
