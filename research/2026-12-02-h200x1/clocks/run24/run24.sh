#!/bin/bash
# one H200: is the attention slower inside a step than alone because alone its inputs sit in the L2 cache?
# in-step kernels from traced ddp steps, then every GEMM and attention timed alone with warm and with cold inputs;
# SM clock, power and clock-event reasons sampled by nvidia-smi every 100 ms throughout
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=/tmp/r24; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch;p=torch.cuda.get_device_properties(0);print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version(),'L2',p.L2_cache_size)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active --format=csv -lms 100 > $R/smi.csv 2>&1 &
SMI=$!
tr_() {  # name model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace \$OUT/trace-$1 --out \$OUT/trace.jsonl"
  timeout 100 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies ddp --micro-batch $3 --seq-len $4 --steps 3 --warmup 2 --trace $R/t-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  stamp "python3 benchmarks/trace_kernels.py \$OUT/trace-$1/ddp/rank0.trace.json.gz --skip 2 --json \$OUT/kernels-$1-ddp.json"
  python3 benchmarks/trace_kernels.py $R/t-$1/ddp/rank0.trace.json.gz --skip 2 --json $R/kernels-$1-ddp.json >> $R/kernels.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  rm -rf $R/t-$1
}
tr_ 3b llama3.2-3b 1 4096
tr_ 1b llama3.2-1b 1 8192
kr() {  # dir models shapes extra
  stamp "python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $2 --shapes $3 $4 --out \$OUT/$1"
  timeout 200 python3 research/2026-12-02-h200x1/scripts/kernel_rates.py --models $2 --shapes $3 $4 --out $R/$1 > $R/$1.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
kr ab-warm llama3.2-3b,llama3.2-1b 1x4096,1x8192 ""
kr ab-cold llama3.2-3b,llama3.2-1b 1x4096,1x8192 --cold
M=llama3.2-1b,qwen2.5-0.5b,llama3.2-3b,research/configs/llama-0.37b.json,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json
S=1x8192,2x4096,4x2048,8x1024,1x16384,1x32768
kr cold "$M" $S --cold
kr warm "$M" $S ""
kill $SMI
cd /tmp && tar czf $OUT/r24.tar.gz r24
cat $R/kernels.txt | grep -v '^ ' | head -30
for f in ab-warm ab-cold; do echo == $f; grep -v -i warn $R/$f.txt | tail -6; done
grep exit $R/commands.txt | tr '\n' ' '
