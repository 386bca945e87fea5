#!/bin/bash
# one H200: bench train records with the GPU's clocks (NVML, sampled by the parent): does step time track the SM clock?
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=/tmp/r25; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
stamp "python3 -m pytest -q -m gpu tests/gpu/test_bench_train_gpu.py -k every_strategy"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_bench_train_gpu.py -k every_strategy > $R/gpu_test.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_() {  # model strategies mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --out \$OUT/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
tr_ llama3.2-1b ddp,zero2,zero3 1 8192
tr_ llama3.2-3b ddp,zero3 1 4096
tr_ qwen2.5-0.5b ddp,zero3 1 8192
tr_ research/configs/llama-0.95b.json ddp,zero2 4 2048
tr_ research/configs/llama-2.46b-gqa.json ddp,zero3 2 2048
tr_ llama3.2-1b ddp,zero2,zero3 1 8192
cd /tmp && tar czf $OUT/r25.tar.gz r25
tail -3 $R/gpu_test.txt
python3 - <<'PY'
import json
for l in open('/tmp/r25/train.jsonl'):
    r=json.loads(l); c=(r.get('gpu_clocks') or [{}])[0]
    print(f"{r['model'][:22]:22s} {r['strategy']:6s} {r['micro_batch']}x{r['seq_len']:<5} {r['status']:4s} {1e3*(r['step_time_s'] or 0):7.1f} ms  SM {c.get('sm_mhz_mean',0):6.0f} min {c.get('sm_mhz_min',0):5.0f} P {c.get('power_w_mean',0):4.0f} W capped {c.get('power_capped_share',0):.2f} n {c.get('samples',0)}")
PY
grep exit $R/commands.txt | tr '\n' ' '
