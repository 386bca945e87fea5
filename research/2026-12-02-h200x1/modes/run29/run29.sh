#!/bin/bash
# one H200: StepMonitor's clock path on the GPU; unseen configs with selective checkpointing and compiled, default profile
source .whl/common.sh
stamp "python3 -m pytest -q -m gpu tests/gpu/test_monitor_gpu.py tests/gpu/test_nvml_live.py"
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_monitor_gpu.py tests/gpu/test_nvml_live.py > $R/gpu_tests.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "torchrun --standalone --nproc-per-node 1 examples/train_with_monitor.py --model llama3.2-1b --seq-len 1024 --steps 30 --run-dir /tmp/mon && python3 -m topowise monitor summarize /tmp/mon"
(timeout 120 torchrun --standalone --nproc-per-node 1 examples/train_with_monitor.py --model llama3.2-1b --seq-len 1024 --steps 30 --run-dir /tmp/mon && python3 -m topowise monitor summarize /tmp/mon) > $R/monitor.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tr_ research/configs/llama-0.95b.json zero2 4 2048 "--checkpointing selective"
tr_ research/configs/llama-2.46b-gqa.json ddp 2 2048 "--checkpointing selective --selective-ac-option 2"
tr_ research/configs/llama-wide-l8.json zero3 2 4096 "--checkpointing selective"
tr_ research/configs/llama-deep-narrow.json zero3 8 2048 "--checkpointing selective --selective-ac-option 3"
tr_ research/configs/llama-0.37b.json ddp,zero2 8 1024 --compile
table
tail -3 $R/gpu_tests.txt; tail -12 $R/monitor.txt
