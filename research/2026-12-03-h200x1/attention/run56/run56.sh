#!/bin/bash
# one H200: (1) the causal attention alone over batch x heads, sequence, head dim, GQA (burst), the six traced steps'
# attention held for seconds, the GPU's idle between kernels with and without the profiler; (2) DeepSpeed ZeRO-2's
# optimizer step traced (llama3.2-1b at 128 and 8192 tokens, the 0.95B config at 4 x 2048), its blocking calls and kernels in time order; (3) llama3.2-1b untraced, then
# traced, to see what the profiler adds to a step
source .whl/common.sh
stamp "python3 .whl/attn_probe.py \$OUT"
timeout 300 python3 .whl/attn_probe.py $R > $R/probe.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tw_() {  # model strategies mb seq extra
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out \$OUT/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
stamp "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl; echo "### exit $?" >> $R/commands.txt
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
for c in "llama3.2-1b 1 128 l1b" "llama3.2-1b 1 8192 l1b" "research/configs/llama-0.95b.json 4 2048 095b"; do
  set -- $c
  tw_ $1 zero2 $2 $3 "--engine deepspeed --trace /tmp/traces/ds-$4-$3"
  for s in -2 -3; do
    stamp "python3 .whl/phase_timeline.py /tmp/traces/ds-$4-$3/zero2/rank0.trace.json.gz --step $s >> \$OUT/timeline.txt"
    python3 .whl/phase_timeline.py /tmp/traces/ds-$4-$3/zero2/rank0.trace.json.gz --step $s >> $R/timeline.txt 2>&1; echo "### exit $?" >> $R/commands.txt
  done
done
export PYTHONPATH=$PWD
tw_ llama3.2-1b ddp,zero3 2 4096
tw_ llama3.2-1b ddp,zero3 2 4096 "--trace /tmp/traces/l1b"
tail -32 $R/probe.txt
table
grep -A4 "phase  " $R/train.txt | grep -v "^--"
head -60 $R/timeline.txt
