#!/bin/bash
# one H200, one launch: the host's time per block under ddp at 1 x 128, eager and compiled, on six models whose
# blocks DDPOptimizer compiles in 2 to 6 pieces: does the compiled host time grow with the pieces
source .whl/common.sh
C=research/configs
for m in $C/llama-deep-narrow.json gpt2 $C/llama-0.37b.json qwen2.5-0.5b llama3.2-1b llama3.2-3b; do
  tr_ $m ddp 1 128 ""
  tr_ $m ddp 1 128 "--compile"
done
table
python3 - <<'PY'
import json, os
for l in open(os.environ['OUT'] + '/train.jsonl'):
    r = json.loads(l); h = r['host_phase_s']; L = r['model_spec']['num_layers']
    print(f"{r['model'][-20:]:20s} c={int(bool(r.get('compile')))} step {1e3*r['step_time_s']:6.1f} host/block fwd {1e3*h['forward']/L:5.2f} bwd {1e3*h['backward']/L:5.2f} opt {1e3*h['optimizer']:5.2f} idx {r['host_index']['us_per_op']:5.2f}")
PY
