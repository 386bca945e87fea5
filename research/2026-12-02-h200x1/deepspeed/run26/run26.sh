#!/bin/bash
# one H200: DeepSpeed ZeRO-1/2/3 (0.19.8) with the host's time per phase (host_phase_s): 128-token floors of three
# models, then two GPU-bound shapes, for a DeepSpeed host term
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl || exit
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0 PYTHONUNBUFFERED=1
R=/tmp/r26; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch,deepspeed;print('torch',torch.__version__,torch.version.cuda,'deepspeed',deepspeed.__version__)" 2>/dev/null | tail -1; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
ds() {  # model mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --engine deepspeed --model $1 --strategies zero1,zero2,zero3 --micro-batch $2 --seq-len $3 --steps 5 --warmup 2 --out \$OUT/deepspeed.jsonl"
  timeout 140 python3 -m topowise bench train --nproc 1 --device cuda --engine deepspeed --model $1 --strategies zero1,zero2,zero3 --micro-batch $2 --seq-len $3 --steps 5 --warmup 2 --out $R/deepspeed.jsonl >> $R/deepspeed.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
ds llama3.2-1b 1 128
ds qwen2.5-0.5b 1 128
ds research/configs/llama-0.37b.json 1 128
ds qwen2.5-0.5b 1 8192
ds research/configs/llama-0.95b.json 4 2048
cd /tmp && tar czf $OUT/r26.tar.gz r26
python3 - <<'PY'
import json
for l in open('/tmp/r26/deepspeed.jsonl'):
    r=json.loads(l); h=r.get('host_phase_s') or {}
    print(f"{r['model'][:20]:20s} {r['strategy']:6s} {r['micro_batch']}x{r['seq_len']:<5} {r['status']:4s} {1e3*(r['step_time_s'] or 0):7.1f} ms  host " + " ".join(f"{k[:3]} {1e3*v:6.1f}" for k,v in h.items()))
PY
grep exit $R/commands.txt | tr '\n' ' '
