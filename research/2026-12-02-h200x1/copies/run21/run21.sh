#!/bin/bash
# one H200: traced steps of DeepSpeed ZeRO-1/2/3 (llama3.2-1b 1 x 8192) by kernel (benchmarks/trace_kernels.py), and
# llama3.2-3b's matmuls and attention alone (research/2026-12-02-h200x1/scripts/kernel_rates.py) beside a traced ddp step of it on the same GPU
R=/tmp/r21; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; python3 --version; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "^(Model name|CPU\(s\))") > $R/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl > $R/ds-install.txt 2>&1
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
python3 -c "import deepspeed; print('deepspeed', deepspeed.__version__)" >> $R/ds-install.txt 2>&1
tr_() {  # name model mb seq strategies engine timeout
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --engine $6 --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace \$OUT/t-$1 --out \$OUT/trace.jsonl"
  timeout $7 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $5 --engine $6 --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace $R/t-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  for s in ${5//,/ }; do
    stamp "python3 benchmarks/trace_kernels.py \$OUT/t-$1/$s/rank0.trace.json.gz --skip 2 --json \$OUT/kernels-$1-$s.json"
    python3 benchmarks/trace_kernels.py $R/t-$1/$s/rank0.trace.json.gz --skip 2 --json $R/kernels-$1-$s.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
    cp $R/t-$1/$s/breakdown.json $R/breakdown-$1-$s.json 2>/dev/null
  done
  rm -rf $R/t-$1
}
tr_ ds1b llama3.2-1b 1 8192 zero1,zero2,zero3 deepspeed 240
tr_ 3b llama3.2-3b 1 4096 ddp pytorch 90
stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models llama3.2-3b --shapes 1x4096 --out \$OUT/kr"
timeout 90 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models llama3.2-3b --shapes 1x4096 --out $R/kr > $R/kernel-rates.txt 2>&1; echo "### exit $?" >> $R/commands.txt
(cd /tmp && tar czf $OUT/r21.tar.gz r21); cp $R/kernels.txt $R/commands.txt $R/kernel-rates.txt $OUT/
tail -2 $R/ds-install.txt; grep -E "error" $R/trace.txt | head -5
grep -E "trace.json|total|matmul|attention|elementwise|copy" $R/kernels.txt
tail -3 $R/kernel-rates.txt
grep exit $R/commands.txt | tr '\n' ' '
