#!/bin/bash
# one H200: what is alive at the memory peak (selective, compiled, every-k), what one block keeps; StepMonitor's overhead
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=/tmp/r31; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)") > $R/machine.txt
mp() { stamp "python3 research/2026-12-02-h200x1/scripts/memory_peak.py $* --out \$OUT"; timeout 150 python3 research/2026-12-02-h200x1/scripts/memory_peak.py "$@" --out $R >> $R/memory_peak.txt 2>&1; echo "### exit $?" >> $R/commands.txt; }
sb() { stamp "python3 research/2026-12-02-h200x1/scripts/saved_bytes.py $* --out \$OUT"; timeout 200 python3 research/2026-12-02-h200x1/scripts/saved_bytes.py "$@" --out $R >> $R/saved_bytes.txt 2>&1; echo "### exit $?" >> $R/commands.txt; }
W=research/configs/llama-wide-l8.json; S=research/configs/llama-0.37b.json; G=research/configs/llama-2.46b-gqa.json
mp --model $W --strategy zero3 --micro-batch 2 --seq-len 4096 --checkpointing selective
mp --model $W --strategy zero3 --micro-batch 2 --seq-len 4096
mp --model $S --strategy ddp --micro-batch 8 --seq-len 1024 --compile
mp --model $S --strategy ddp --micro-batch 8 --seq-len 1024
mp --model $G --strategy ddp --micro-batch 2 --seq-len 2048 --checkpointing selective --selective-ac-option 2
sb --models $W --shapes 2x4096 --precisions bf16 --modes eager,selective
sb --models llama3.2-1b,$S,llama3.2-3b --shapes 8x1024 --precisions autocast --modes eager,compiled
for shape in "1 8192" "2 1024"; do set -- $shape
  stamp "python3 -m torch.distributed.run --standalone --nproc-per-node 1 research/2026-12-01-h200x1/scripts/monitor_overhead.py --model llama3.2-1b --micro-batch $1 --seq-len $2 --alternations 4 --out \$OUT/monitor_overhead-$2.json"
  timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 1 research/2026-12-01-h200x1/scripts/monitor_overhead.py --model llama3.2-1b --micro-batch $1 --seq-len $2 --alternations 4 --out $R/monitor_overhead-$2.json >> $R/monitor_overhead.txt 2>&1; echo "### exit $?" >> $R/commands.txt
done
cd /tmp && tar czf $OUT/r31.tar.gz r31; cp $R/*.txt $OUT/ 2>/dev/null
grep -v Warning $R/memory_peak.txt | grep -E 'replayed|GiB' | head -80
grep -v '^\s*$' $R/saved_bytes.txt | grep -v -i warn | tail -14
grep -i 'overhead\|median' $R/monitor_overhead.txt | tail -4
grep exit $R/commands.txt | tr '\n' ' '
