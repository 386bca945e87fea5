#!/bin/bash
# one H200: the host's time per block under checkpointing (1 x 128 tokens, where the GPU keeps up), two models x ddp, zero3 x none, per op, full; two unseen host-bound runs
source .whl/common.sh
C=research/configs
for m in llama3.2-1b qwen2.5-0.5b; do
  tr_ $m ddp,zero3 1 128 ""
  tr_ $m ddp,zero3 1 128 "--checkpointing selective"
  tr_ $m ddp,zero3 1 128 "--checkpointing full"
done
tr_ $C/llama-deep-narrow.json ddp 8 2048 "--checkpointing full"
tr_ $C/llama-deep-narrow.json zero2 8 2048 "--checkpointing selective"
table
