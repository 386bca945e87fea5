#!/bin/bash
# one H200: the output layer's GEMMs with a vocabulary that is not a multiple of 8 beside its padded twin
source .whl/common.sh
stamp "python3 research/2026-12-02-h200x1/scripts/head_gemm.py --models .whl/llama-h768-v50257.json,.whl/llama-h768-v50304.json,llama3.2-1b,.whl/llama1b-v128257.json --tokens 8192 --out \$OUT"
timeout 90 python3 research/2026-12-02-h200x1/scripts/head_gemm.py --models .whl/llama-h768-v50257.json,.whl/llama-h768-v50304.json,llama3.2-1b,.whl/llama1b-v128257.json --tokens 8192 --out $R > $R/head_gemm.txt 2>&1; echo "### exit $?" >> $R/commands.txt
cp .whl/llama-h768-v50257.json .whl/llama-h768-v50304.json .whl/llama1b-v128257.json $R/
cat $R/head_gemm.txt
