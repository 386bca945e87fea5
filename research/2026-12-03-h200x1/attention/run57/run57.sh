#!/bin/bash
# one H200: steps of shapes whose attention the thread blocks price differently from the sequence form, predicted
# before the call (predicted-before.txt); DeepSpeed ZeRO-2 untraced beside its traced steps of run56
source .whl/common.sh
stamp "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/ds/*.whl; echo "### exit $?" >> $R/commands.txt
export PYTHONPATH=$PWD:/tmp/site DS_BUILD_OPS=0
tr_ llama3.2-1b zero2 1 8192 "--engine deepspeed"
tr_ llama3.2-1b zero2 1 128 "--engine deepspeed"
export PYTHONPATH=$PWD
tr_ llama3.2-1b ddp 1 32768
tr_ research/configs/smollm2-360m.json ddp 1 32768
tr_ research/configs/smollm2-135m.json ddp 1 16384
tr_ research/configs/qwen3-0.6b.json ddp 1 4096
table
