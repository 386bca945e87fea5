#!/bin/bash
# one H200: what a compiled block saves in the step's setting (DDP splits the compiled graph at its buckets),
# measured per block, then in four compiled steps whose memory the model predicts before they run
source .whl/common.sh
stamp "python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models gpt2,qwen2.5-0.5b,research/configs/llama-deep-narrow.json --shapes 4x1024 --precisions autocast --modes eager,compiled --setting model --ddp --layers 2 --out \$OUT"
timeout 240 python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models gpt2,qwen2.5-0.5b,research/configs/llama-deep-narrow.json --shapes 4x1024 --precisions autocast --modes eager,compiled --setting model --ddp --layers 2 --out $R > $R/saved_bytes.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models gpt2 --shapes 4x1024 --precisions bf16 --modes eager,compiled --setting model --layers 2 --out \$OUT"
timeout 90 python3 research/2026-12-02-h200x1/scripts/saved_bytes.py --models gpt2 --shapes 4x1024 --precisions bf16 --modes eager,compiled --setting model --layers 2 --out $R >> $R/saved_bytes.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_ qwen2.5-0.5b ddp,zero1 4 2048 "--compile"
tr_ gpt2 ddp,zero2 8 1024 "--compile"
grep -v "^$" $R/saved_bytes.txt | grep -E "^(model|gpt2|qwen|onfigs)" 
table
