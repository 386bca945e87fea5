#!/bin/bash
# one H200: timelines of per-op selective beside no checkpointing (0.95B config, ddp and zero2, 4 x 2048): does the
# backward hide the forward's host lag; then one block's kernels eager and compiled, narrow to wide
source .whl/common.sh
C=research/configs
for ck in none selective; do
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $C/llama-0.95b.json --strategies ddp,zero2 --micro-batch 4 --seq-len 2048 --steps 4 --warmup 2 --checkpointing $ck --trace /tmp/tr-$ck --out \$OUT/train.jsonl"
  timeout 200 python3 -m topowise bench train --nproc 1 --device cuda --model $C/llama-0.95b.json --strategies ddp,zero2 --micro-batch 4 --seq-len 2048 --steps 4 --warmup 2 --checkpointing $ck --trace /tmp/tr-$ck --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  for s in ddp zero2; do echo "== $ck $s" >> $R/timeline.txt; python3 research/2026-11-30-h200x2/scripts/timeline.py /tmp/tr-$ck/$s --record $R/train.jsonl >> $R/timeline.txt 2>&1; mkdir -p /tmp/bd/$ck-$s; cp /tmp/tr-$ck/$s/breakdown.json /tmp/bd/$ck-$s/ 2>/dev/null; done
done
M=$C/llama-deep-narrow.json,$C/llama-0.37b.json,llama3.2-1b
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 8x1024 --blocks --compile --out \$OUT/kr"
timeout 330 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $M --shapes 8x1024 --blocks --compile --out /tmp/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
cp /tmp/kr/kernel_rates.jsonl $R/ 2>/dev/null
(cd /tmp && tar czf $R/breakdowns.tar.gz bd)
table
grep -v Warn $R/timeline.txt | head -80
python3 research/2026-12-02-h200x1/scripts/elementwise_check.py $R/kernel_rates.jsonl
grep exit $R/commands.txt | tr '\n' ' '
