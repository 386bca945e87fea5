#!/bin/bash
# one H200: the host's run-ahead across phases, host floor and real shapes in one launch
export PYTHONPATH=$PWD
R=$OUT; mkdir -p $R
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
stamp "python3 research/2026-12-02-h200x1/scripts/host_runahead.py --out \$OUT/hr"
timeout 400 python3 research/2026-12-02-h200x1/scripts/host_runahead.py --out $R/hr > $R/host-runahead.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -32 $R/host-runahead.txt | cut -c1-230
grep exit $R/commands.txt | tr '\n' ' '
