#!/bin/bash
# one call on nvidia-h200: the changed bench transformer beside torchtitan (both orders), bench train, GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=$OUT/r; mkdir -p $R/vs-a $R/vs-b $R/train
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda,torch.backends.cudnn.version())"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
OLD=file:.whl/variants/transformer_2026-12-01.py
stamp "python3 research/2026-12-02-h200x1/scripts/vs_torchtitan.py --out \$OUT/vs-a --models ours:sdpa:cudnn,$OLD,torchtitan --steps 8 --warmup 3"
python3 research/2026-12-02-h200x1/scripts/vs_torchtitan.py --out $R/vs-a --models ours:sdpa:cudnn,$OLD,torchtitan --steps 8 --warmup 3 > $R/vs-a/output.txt 2>&1; echo "### exit $?" >> $R/commands.txt
for spec in "llama3.2-1b 1 8192 ddp,zero2,zero3" "research/2026-12-01-h200x1/smallvocab/llama-0.95b.json 4 2048 ddp,zero2,zero3"; do
  set -- $spec
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --micro-batch $2 --seq-len $3 --strategies $4 --steps 6 --out \$OUT/train/train.jsonl"
  python3 -m topowise bench train --nproc 1 --device cuda --model $1 --micro-batch $2 --seq-len $3 --strategies $4 --steps 6 --out $R/train/train.jsonl > $R/train/$(basename $1 .json)-$2x$3.txt 2>&1; echo "### exit $?" >> $R/commands.txt
done
stamp "python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu > $R/gpu_tests.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 research/2026-12-02-h200x1/scripts/vs_torchtitan.py --out \$OUT/vs-b --models torchtitan,$OLD,ours:sdpa:cudnn --steps 8 --warmup 3"
python3 research/2026-12-02-h200x1/scripts/vs_torchtitan.py --out $R/vs-b --models torchtitan,$OLD,ours:sdpa:cudnn --steps 8 --warmup 3 > $R/vs-b/output.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -3 $R/gpu_tests.txt; for f in $R/train/*.txt; do echo $f; tail -6 $f; done; tail -19 $R/vs-a/output.txt | cut -c1-100; tail -19 $R/vs-b/output.txt | cut -c1-100
