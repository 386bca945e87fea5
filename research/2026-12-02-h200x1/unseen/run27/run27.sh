#!/bin/bash
# one H200: three Llama-style configs whose blocks no calibration or earlier validation run has, predicted by the default profile
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=/tmp/r27; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
tr_() {  # model strategies mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --out \$OUT/train.jsonl"
  timeout 170 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
tr_ research/configs/llama-wide-l8.json ddp,zero2,zero3 1 4096
tr_ research/configs/llama-deep-narrow.json ddp,zero2,zero3 4 2048
tr_ research/configs/llama-vocab256k.json ddp,zero3 2 4096
cd /tmp && tar czf $OUT/r27.tar.gz r27
python3 - <<'PY'
import json
for l in open('/tmp/r27/train.jsonl'):
    r=json.loads(l); c=(r.get('gpu_clocks') or [{}])[0]; p=r.get('predicted') or {}
    print(f"{r['model'][:24]:24s} {r['strategy']:6s} {r['micro_batch']}x{r['seq_len']:<5} {r['status']:4s} {1e3*(r['step_time_s'] or 0):7.1f} pred {1e3*p.get('step_time_s',0):7.1f} err {100*(p.get('step_time_error') or 0):+5.1f}% mem {100*(p.get('peak_memory_error') or 0):+5.1f}% wait {1e3*p.get('host_wait_s',0):5.1f}  SM {c.get('sm_mhz_mean',0):5.0f}")
PY
grep exit $R/commands.txt | tr '\n' ' '
