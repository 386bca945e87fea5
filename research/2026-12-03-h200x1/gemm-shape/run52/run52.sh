#!/bin/bash
# one H200: a GEMM's rate in a burst and sustained, with its SM clock; the block GEMMs of eight configs no GEMM fit saw,
# timed alone; whole steps of narrow configs no fit saw, predicted before (predicted-before.txt)
source .whl/common.sh
C=research/configs
stamp "python3 .whl/gemm_clock.py \$OUT/gemm_clock.json"
timeout 120 python3 .whl/gemm_clock.py $R/gemm_clock.json > $R/gemm_clock.txt 2>&1; echo "### exit $?" >> $R/commands.txt
M=$C/qwen3-0.6b.json,$C/qwen3-1.7b.json,$C/mistral-nemo-l8.json,$C/llama-deep-narrow.json,$C/smollm2-360m.json,$C/smollm2-135m.json,$C/llama-wide-l8.json,$C/llama-vocab256k.json
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,1x16384 --out \$OUT/kr"
timeout 200 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 1x8192,1x16384 --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_ $C/smollm2-360m.json ddp,zero3 8 4096 ""
tr_ $C/smollm2-360m.json ddp 8 4096 "--compile"
tr_ $C/smollm2-135m.json ddp,zero2 16 4096 ""
tr_ $C/llama-deep-narrow.json ddp 8 4096 ""
tr_ qwen2.5-0.5b zero2 4 8192 ""
tr_ $C/qwen3-0.6b.json zero2 4 4096 ""
cat $R/gemm_clock.txt
tail -3 $R/kernel-rates.txt | cut -c1-150
table
