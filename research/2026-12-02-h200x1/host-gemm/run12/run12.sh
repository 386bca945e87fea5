#!/bin/bash
# one H200: the output layer's GEMM rates; the host's run-ahead across phases (joined launch); traced host waits
export PYTHONPATH=$PWD
R=$OUT/r; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
done_() { echo "### exit $1" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
M=llama3.2-1b,qwen2.5-0.5b,llama3.2-3b,research/configs/llama-0.37b.json,research/configs/llama-0.95b.json,research/configs/llama-2.46b-gqa.json
stamp "python3 research/2026-12-02-h200x1/scripts/head_gemm.py --models $M --tokens 8192 --out \$OUT/head-gemm"
timeout 120 python3 research/2026-12-02-h200x1/scripts/head_gemm.py --models $M --tokens 8192 --out $R/head-gemm > $R/head-gemm.txt 2>&1; done_ $?
stamp "python3 research/2026-12-02-h200x1/scripts/host_runahead.py --out \$OUT/host-runahead"
timeout 330 python3 research/2026-12-02-h200x1/scripts/host_runahead.py --out $R/host-runahead > $R/host-runahead.txt 2>&1; done_ $?
trace() {  # name model strategies mb seq
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $3 --micro-batch $4 --seq-len $5 --steps 6 --warmup 3 --trace \$OUT/trace-$1 --out \$OUT/trace.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $2 --strategies $3 --micro-batch $4 --seq-len $5 --steps 6 --warmup 3 --trace $R/trace-$1 --out $R/trace.jsonl >> $R/trace.txt 2>&1; done_ $?
  rm -f $R/trace-$1/*/*.trace.json.gz
}
trace qwen qwen2.5-0.5b zero2,zero3,ddp 2 4096
trace 037b research/configs/llama-0.37b.json zero3,zero2 8 1024
python3 - > $R/trace-phases.txt <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/trace-*/*/breakdown.json")):
    d = json.load(open(f))["ranks"]["0"]["median_step"]
    print(f.split("/r/")[1], " | ".join(f"{p}: " + ", ".join(f"{k} {v*1e3:.1f}" for k, v in d["phases"][p]["pieces"].items()) + f", lead {d['phases'][p].get('lead_s', 0)*1e3:.1f}" for p in ("forward", "backward", "optimizer")))
PY
cat $R/head-gemm.txt | tail -9
tail -30 $R/host-runahead.txt | cut -c1-220
cat $R/trace-phases.txt | cut -c1-400
grep exit $R/commands.txt | tr '\n' ' '
