#!/bin/bash
# one H200: the compile GPU tests, the new DDP one among them
source .whl/common.sh
stamp "python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_compile_gpu.py"
timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_compile_gpu.py > $R/gpu_test.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -5 $R/gpu_test.txt
