#!/bin/bash
# one H200: the per-parameter copies timed alone (research/2026-12-02-h200x1/scripts/copy_rates.py); traced steps of a held-out config
# under all four strategies, of DeepSpeed's ZeRO-1/2/3 and of the 2.46B GQA config (benchmarks/trace_kernels.py)
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 --version; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "^(Model name|CPU\(s\))") > $R/machine.txt 2>&1
stamp "python3 research/2026-12-02-h200x1/scripts/copy_rates.py --models llama3.2-1b,llama3.2-3b,qwen2.5-0.5b,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json --out \$OUT"
timeout 150 python3 research/2026-12-02-h200x1/scripts/copy_rates.py --models llama3.2-1b,llama3.2-3b,qwen2.5-0.5b,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json --out $R > $R/copy_rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_() {  # name model mb seq strategies [engine]
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --engine ${6:-pytorch} --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace \$OUT/t-$1 --out \$OUT/trace.jsonl"
  timeout $7 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --engine ${6:-pytorch} --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace $R/t-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  for s in ${5//,/ }; do
    stamp "python3 benchmarks/trace_kernels.py \$OUT/t-$1/$s/rank0.trace.json.gz --skip 2 --json \$OUT/kernels-$1-$s.json"
    python3 benchmarks/trace_kernels.py $R/t-$1/$s/rank0.trace.json.gz --skip 2 --json $R/kernels-$1-$s.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  done
  rm -rf $R/t-$1
}
tr_ 095b research/configs/llama-0.95b.json 2 4096 ddp,zero1,zero2,zero3 pytorch 200
( python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ds/*.whl > $R/ds-install.txt 2>&1
  export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
  python3 -c "import deepspeed; print('deepspeed', deepspeed.__version__)" >> $R/ds-install.txt 2>&1
  tr_ ds1b llama3.2-1b 1 8192 zero1,zero2,zero3 deepspeed 170 )
tr_ 246b research/configs/llama-2.46b-gqa.json 1 4096 ddp,zero2 pytorch 110
cat $R/copy_rates.txt | tail -8
cat $R/kernels.txt | grep -E "trace.json|total|matmul|elementwise|copy" | head -60
tail -3 $R/ds-install.txt
grep exit $R/commands.txt | tr '\n' ' '
