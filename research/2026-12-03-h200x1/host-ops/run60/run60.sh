source .whl/common.sh
cp .whl/predicted-before.txt $R/
stamp "python3 .whl/count_ops.py \$OUT"
timeout 150 python3 .whl/count_ops.py $R > $R/count_ops.txt 2>&1; echo "### exit $?" >> $R/commands.txt
grep "per block" $R/count_ops.txt | cut -c1-150
tr_ research/configs/qwen3-0.6b.json ddp,zero2,zero3 1 128
tr_ gpt2 ddp,zero2,zero3 1 128
tr_ research/configs/qwen3-0.6b.json ddp 1 4096
tr_ llama3.2-1b ddp,zero2,zero3 1 128
table
tr_ research/configs/qwen3-1.7b.json ddp,zero3 1 1024
tr_ gpt2 ddp 4 1024
table
