#!/bin/bash
# one H200: checkpointed runs under autocast (ddp, zero1) on configs no fit saw, predicted before the run; one history
source .whl/common.sh
mp() { stamp "python3 research/2026-12-02-h200x1/scripts/memory_peak.py $* --out \$OUT"; timeout 150 python3 research/2026-12-02-h200x1/scripts/memory_peak.py "$@" --out $R >> $R/memory_peak.txt 2>&1; echo "### exit $?" >> $R/commands.txt; }
C=research/configs
tr_ llama3.2-1b ddp 1 8192 "--checkpointing selective"
tr_ $C/llama-0.95b.json ddp 4 2048 "--checkpointing selective"
tr_ llama3.2-3b ddp 2 2048 "--checkpointing full"
tr_ $C/llama-0.37b.json zero1 8 1024 "--checkpointing selective --selective-ac-option 2"
tr_ qwen2.5-0.5b ddp 4 2048 "--checkpointing selective --selective-ac-option 3"
tr_ $C/llama-2.46b-gqa.json zero1 2 2048 "--checkpointing full"
tr_ $C/llama-deep-narrow.json ddp 8 2048 "--checkpointing selective"
mp --model llama3.2-1b --strategy ddp --micro-batch 1 --seq-len 8192 --checkpointing selective
table
grep -v Warning $R/memory_peak.txt | grep -E 'replayed|GiB' | head -30
