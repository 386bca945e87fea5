#!/bin/bash
# one H200: one launch, per-op selective against none on the 0.95B config, ddp and zero2: at 1 x 128 (the host alone)
# and at 4 x 2048 twice, untraced: does the 128-token host term hold at the real shape in the same machine start
source .whl/common.sh
C=research/configs
for round in 1 2; do
  for ck in none selective; do
    tr_ $C/llama-0.95b.json ddp,zero2 1 128 "--checkpointing $ck"
    tr_ $C/llama-0.95b.json ddp,zero2 4 2048 "--checkpointing $ck"
  done
done
table
python3 - <<'PY'
import json, os
for l in open(os.environ['OUT'] + '/train.jsonl'):
    r = json.loads(l); h = r['host_phase_s']; L = r['model_spec']['num_layers']
    print(f"{r['strategy']:5s} {r['micro_batch']}x{r['seq_len']:<5} {r.get('checkpointing'):9s} step {1e3*r['step_time_s']:6.1f} host/block fwd {1e3*h['forward']/L:5.2f} bwd {1e3*h['backward']/L:5.2f}")
PY
