#!/bin/bash
# one H200: every GPU test on this tree (the host by its operators)
source .whl/common.sh
stamp "python3 -m pytest -q -m gpu tests/gpu > \$OUT/gpu_tests.txt"
timeout 280 python3 -m pytest -q -m gpu tests/gpu > $R/gpu_tests.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -3 $R/gpu_tests.txt
