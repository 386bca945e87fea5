#!/bin/bash
# one H200: checkpointed runs no fit saw, predicted before they ran (the checkpointing host terms, the autocast-cache term)
source .whl/common.sh
C=research/configs
tr_ qwen2.5-0.5b zero3 4 2048 "--checkpointing selective"
tr_ llama3.2-3b ddp 2 2048 "--checkpointing selective"
tr_ $C/llama-0.37b.json ddp 8 1024 "--checkpointing full"
tr_ $C/llama-2.46b-gqa.json zero2 2 2048 "--checkpointing selective"
tr_ $C/llama-deep-narrow.json zero3 8 2048 "--checkpointing full"
table
