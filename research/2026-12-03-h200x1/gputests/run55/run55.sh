#!/bin/bash
# one H200: every GPU test on this tree (the block GEMMs by shape under the power limit)
source .whl/common.sh
stamp "python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu"
timeout 540 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu > $R/gpu_tests.txt 2>&1; echo "### exit $?" >> $R/commands.txt
tail -n 4 $R/gpu_tests.txt
