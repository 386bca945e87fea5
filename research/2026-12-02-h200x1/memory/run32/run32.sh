#!/bin/bash
# one H200: compiled ddp (autocast) at two shapes per model: what the compiled blocks keep in a step
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)") > $R/machine.txt
mp() { stamp "python3 research/2026-12-02-h200x1/scripts/memory_peak.py $* --out \$OUT"; timeout 100 python3 research/2026-12-02-h200x1/scripts/memory_peak.py "$@" --out $R >> $R/memory_peak.txt 2>&1; echo "### exit $?" >> $R/commands.txt; }
S=research/configs/llama-0.37b.json
mp --model llama3.2-1b --strategy ddp --micro-batch 8 --seq-len 1024 --compile
mp --model llama3.2-1b --strategy ddp --micro-batch 1 --seq-len 8192 --compile
mp --model $S --strategy ddp --micro-batch 1 --seq-len 8192 --compile
mp --model llama3.2-3b --strategy ddp --micro-batch 8 --seq-len 1024 --compile
python3 - <<'PY'
import json, os
for l in open(os.environ['OUT'] + '/memory_peak.jsonl'):
    r = json.loads(l); m = r['modelled']['allocated_bytes']
    print(r['model'][-14:], r['micro_batch'], r['seq_len'], 'replayed %.3f GiB, model %.3f, %+.1f%%' % (r['replayed_peak_bytes']/2**30, m/2**30, 100*(m/r['replayed_peak_bytes']-1)))
PY
grep exit $R/commands.txt | tr '\n' ' '
