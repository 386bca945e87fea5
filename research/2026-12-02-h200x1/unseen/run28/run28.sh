#!/bin/bash
# one H200: two of the unseen configs compiled and with selective (per-op) checkpointing, predicted by the default profile
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)") > $R/machine.txt
tr_() {  # model strategies mb seq extra
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out \$OUT/train.jsonl"
  timeout 130 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
tr_ research/configs/llama-wide-l8.json ddp,zero3 1 4096 --compile
tr_ research/configs/llama-vocab256k.json zero3 2 4096 "--checkpointing selective"
python3 - <<'PY'
import json, os
for l in open(os.environ['OUT'] + '/train.jsonl'):
    r=json.loads(l); p=r.get('predicted') or {}
    print(f"{r['model'][:22]:22s} {r['strategy']:6s} c={r.get('compile')} ac={r.get('checkpointing')} {r['status']:4s} {1e3*(r['step_time_s'] or 0):7.1f} pred {1e3*p.get('step_time_s',0):7.1f} err {100*(p.get('step_time_error') or 0):+5.1f}% mem {100*(p.get('peak_memory_error') or 0):+5.1f}%")
PY
grep exit $R/commands.txt | tr '\n' ' '
