#!/bin/bash
# one H200: FSDP2's root unit at its reduce on the GPU (torch 2.11), tied and untied
source .whl/common.sh
stamp "python3 .whl/fsdp_root.py > \$OUT/fsdp_root.txt"
timeout 120 python3 .whl/fsdp_root.py > $R/fsdp_root.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep -v Warn $R/fsdp_root.txt | tail -12; grep exit $R/commands.txt | tr '\n' ' '
