#!/bin/bash
# one H200: traced steps of DeepSpeed ZeRO-1/2/3 and FSDP2 zero2 (llama3.2-1b 1 x 8192) by kernel (benchmarks/trace_kernels.py);
# llama3.2-3b ddp and zero3 (1 x 4096) again with their timelines read phase by phase (idle GPU: host or comm)
R=/tmp/r20; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 --version; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "^(Model name|CPU\(s\))") > $R/machine.txt 2>&1
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
    stamp "python3 research/2026-11-30-h200x2/scripts/timeline.py \$OUT/t-$1/$s --warmup 2"
    python3 research/2026-11-30-h200x2/scripts/timeline.py $R/t-$1/$s --warmup 2 >> $R/timeline.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  done
  rm -rf $R/t-$1
}
tr_ ds1b llama3.2-1b 1 8192 zero1,zero2,zero3 deepspeed 200
tr_ fsdp1b llama3.2-1b 1 8192 zero2 pytorch 80
tr_ 3b llama3.2-3b 1 4096 ddp,zero3 pytorch 120
(cd /tmp && tar czf $OUT/r20.tar.gz r20); cp $R/kernels.txt $R/timeline.txt $R/commands.txt $OUT/
cat $R/ds-install.txt | tail -2
grep -E "trace.json|total" $R/kernels.txt
grep exit $R/commands.txt | tr '\n' ' '
