source .whl/common.sh
stamp "python3 .whl/host_probe.py \$OUT"
timeout 300 python3 .whl/host_probe.py $R > $R/host_probe.txt 2>&1; echo "### exit $?" >> $R/commands.txt
stamp "python3 .whl/attn_held.py \$OUT"
timeout 200 python3 .whl/attn_held.py $R > $R/attn_held.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep -v "USDT\|Warning\|warn\|return torch" $R/host_probe.txt | tail -14; tail -8 $R/attn_held.txt; grep exit $R/commands.txt | tr '\n' ' '
