export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=$OUT
stamp() { echo "### $(date -u +%FT%TZ) $*" >> $R/commands.txt; }
(date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch;print('torch',torch.__version__,torch.version.cuda)"; lscpu | grep -E "Model name|^CPU\(s\)") > $R/machine.txt
tr_() {  # model strategies mb seq extra
  stamp "python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out \$OUT/train.jsonl"
  timeout 150 python3 -m topowise bench train --nproc 1 --device cuda --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 $5 --out $R/train.jsonl >> $R/train.txt 2>&1; echo "### exit $?" >> $R/commands.txt
}
table() {
python3 - <<'PY'
import json, os
for l in open(os.environ['OUT'] + '/train.jsonl'):
    r=json.loads(l); c=(r.get('gpu_clocks') or [{}])[0]; p=r.get('predicted') or {}
    ac = r.get('checkpointing') or 'none'
    print(f"{r['model'][-22:]:22s} {r['strategy']:6s} {r['micro_batch']}x{r['seq_len']:<5} c={int(bool(r.get('compile')))} ac={ac[:4]}{r.get('selective_ac_option') or ''} {r['status']:4s} {1e3*(r['step_time_s'] or 0):7.1f} pred {1e3*p.get('step_time_s',0):7.1f} err {100*(p.get('step_time_error') or 0):+5.1f}% mem {100*(p.get('peak_memory_error') or 0):+5.1f}% SM {c.get('sm_mhz_mean',0):5.0f}")
PY
grep exit $R/commands.txt | tr '\n' ' '
}
