#!/bin/bash
# one H200: what is alive at the memory peak of FSDP2 steps at 128 tokens (GPT-2 -4.2%, llama3.2-1b -1.5%) beside larger shapes
source .whl/common.sh
mp() { stamp "python3 research/2026-12-02-h200x1/scripts/memory_peak.py $* --out \$OUT"; timeout 120 python3 research/2026-12-02-h200x1/scripts/memory_peak.py "$@" --out $R >> $R/memory_peak.txt 2>&1; echo "### exit $?" >> $R/commands.txt; }
mp --model gpt2 --strategy zero2 --micro-batch 1 --seq-len 128
mp --model gpt2 --strategy zero3 --micro-batch 1 --seq-len 128
mp --model llama3.2-1b --strategy zero2 --micro-batch 1 --seq-len 128
mp --model gpt2 --strategy zero2 --micro-batch 8 --seq-len 1024
mp --model gpt2 --strategy ddp --micro-batch 1 --seq-len 128
grep -v "^ *0.00[0-9] GiB" $R/memory_peak.txt | head -c 9000; grep exit $R/commands.txt | tr "\n" " "
