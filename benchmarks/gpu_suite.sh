#!/usr/bin/env bash
# The GPU measurements recorded in research/, in one run on a GPU machine, from the repo root:
#   OUT=some/dir bash benchmarks/gpu_suite.sh STAGE [STAGE ...]
# Stages: topo comm train plain gputests stall host trace study calibrate validate calibrate-design
# validate-design deepspeed. Each stage has its own time limit so
# one hang cannot eat the rest; everything lands in $OUT/suite/ and is packed into $OUT/suite.tar.gz.
# The multicast switches of the machine (NCCL_NVLS_ENABLE=0, ...) are inherited, never changed.
set -u
OUT=${OUT:-gpu-results}
R=$OUT/suite
mkdir -p "$R"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
T() { local limit=$1; shift; echo "### $(date -u +%FT%TZ) $*" | tee -a "$R/commands.txt"; timeout "$limit" "$@"; echo "### exit $?" >> "$R/commands.txt"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'; env | grep -E '^(NCCL|CUDA|TORCH_SYMM|NVSHMEM)_' | sort; lscpu | grep -E "^(Model name|CPU\(s\)|CPU max MHz|Thread)"; } > "$R/machine.txt" 2>&1
for stage in "$@"; do
  case $stage in
    topo)
      nvidia-smi topo -m > "$R/smi_topo.txt" 2>&1
      nvidia-smi nvlink -s > "$R/smi_nvlink.txt" 2>&1
      T 60 python3 -m topowise topo --json > "$R/topo_live.json" 2> "$R/topo_live.err"
      T 60 python3 -m topowise topo > "$R/topo_live.txt" 2>&1
      T 60 python3 -m topowise topo --file "$R/smi_topo.txt" --gpu-name H200 --json > "$R/topo_smi.json" 2>&1
      T 60 python3 -m topowise env --json > "$R/env.json" 2>&1
      T 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_nvml_live.py > "$R/test_nvml_live.txt" 2>&1 ;;
    comm)
      T 150 python3 -m topowise bench comm --ops all_reduce,all_gather,reduce_scatter --min-bytes 1M --max-bytes 1G --matrix --out "$R/comm-nvlink.jsonl" > "$R/comm-nvlink.txt" 2>&1
      T 150 python3 -m topowise bench comm --ops all_reduce,all_gather,reduce_scatter --min-bytes 1M --max-bytes 1G --fabric pcie --out "$R/comm-pcie.jsonl" > "$R/comm-pcie.txt" 2>&1
      T 30 python3 benchmarks/comm_vs_nccl_tests.py "$R/comm-nvlink.jsonl" "$R/comm-pcie.jsonl" > "$R/comm-vs-nccl-tests.txt" 2>&1
      cp -f "$R"/../*.png "$R"/ 2>/dev/null; cp -f "$R"/comm-nvlink*.png "$R"/ 2>/dev/null ;;
    train)
      T 240 python3 benchmarks/train_mfu.py --fabrics nvlink --out "$R/train.jsonl" > "$R/train-nvlink.txt" 2>&1
      T 200 python3 -m topowise bench train --model llama3.2-1b --micro-batch 1 --seq-len 8192 --strategies ddp,zero1,zero2,zero3 --fabric pcie --out "$R/train.jsonl" > "$R/train-pcie.txt" 2>&1 ;;
    plain)
      T 120 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/plain_train.py --model llama3.2-1b --micro-batch 1 --seq-len 8192 > "$R/plain_train.txt" 2>&1 ;;
    gputests)
      T 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu > "$R/gpu_tests.txt" 2>&1 ;;
    stall)  # zero3 with small blocks: do NCCL's channels (SMs) or the host hold it back? (docs/calibration.md)
      T 150 python3 -m topowise bench train --nproc 2 --model qwen2.5-0.5b --strategies ddp,zero2,zero3 --micro-batch 2 --seq-len 4096 --steps 30 --out "$R/stall.jsonl" > "$R/stall.txt" 2>&1
      T 150 env NCCL_MAX_NCHANNELS=4 python3 -m topowise bench train --nproc 2 --model qwen2.5-0.5b --strategies ddp,zero2,zero3 --micro-batch 2 --seq-len 4096 --steps 30 --out "$R/stall-4ch.jsonl" > "$R/stall-4ch.txt" 2>&1 ;;
    host)  # host-bound or GPU-bound? step floors at 128 tokens, a token sweep, AdamW and loss passes alone
      T 300 python3 benchmarks/host_bound.py --out-dir "$R/host" > "$R/host.txt" 2>&1 ;;
    trace)  # where does a step's time go? profiler timelines per rank, read phase by phase into DIR/<strategy>/breakdown.json and .png
      { command -v nsys; ls /usr/local/cuda/bin; } > "$R/tools.txt" 2>&1
      for c in "qwen2.5-0.5b zero3 2 4096" "qwen2.5-0.5b zero2 2 4096" "qwen2.5-0.5b ddp 2 4096" "qwen2.5-0.5b zero3 1 128" \
               "llama3.2-1b zero3 2 2048" "llama3.2-1b zero2 2 2048"; do set -- $c
        d="$R/trace-$1-$2-mb$3-seq$4"
        T 120 python3 -m topowise bench train --trace "$d" --model $1 --strategies $2 --micro-batch $3 --seq-len $4 --steps 6 --warmup 2 --out "$R/trace.jsonl" >> "$R/trace.txt" 2>&1
        mv -f "$d/$2"/rank0.trace.json.gz "$OUT/trace-$1-$2-mb$3-seq$4.rank0.json.gz" 2>/dev/null  # rank 0 timeline beside the tarball
        rm -f "$d"/*/rank*.trace.json.gz  # large; breakdown.json keeps what was read from them
      done ;;
    study)
      T 300 python3 -m topowise study --measure --trace --out "$R/study" > "$R/study.txt" 2>&1 ;;
    calibrate)
      T 240 python3 -m topowise calibrate --out "$R/profile.json" > "$R/calibrate.txt" 2>&1 ;;
    validate)  # PROFILE=path picks a profile calibrated in an earlier run
      T 420 python3 -m topowise validate --profile "${PROFILE:-$R/profile.json}" --out "$R/validate.jsonl" > "$R/validate.txt" 2>&1 ;;
    calibrate-design)  # the designed calibration (calibrate/design.py)
      T 240 python3 -m topowise calibrate --design --out "$R/profile-design.json" > "$R/calibrate-design.txt" 2>&1 ;;
    validate-design)  # its validation with compiled twins; ROUND=n names the repeat (one per call: about 6 min)
      T 540 python3 -m topowise validate --design --compile --profile "${PROFILE:-$R/profile-design.json}" \
        --out "$R/validate-design-${ROUND:-1}.jsonl" > "$R/validate-design-${ROUND:-1}.txt" 2>&1
      # the same cases as the default profile predicted them before any ran (research/2026-12-04-predicted-h200x2)
      T 60 python3 research/2026-12-04-predicted-h200x2/design_predictions.py --measured "$R/validate-design-${ROUND:-1}.jsonl" \
        --predicted research/2026-12-04-predicted-h200x2/predictions-default.jsonl > "$R/predicted-before-${ROUND:-1}.txt" 2>&1 ;;
    deepspeed)  # DeepSpeed and its few missing dependencies travel as wheels in .whl/ (docs/deepspeed.md)
      ( python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site:$PYTHONPATH DS_BUILD_OPS=0 &&
        T 330 python3 benchmarks/deepspeed_vs_fsdp.py --out-dir "$R/deepspeed" > "$R/deepspeed.txt" 2>&1 ) ;;
    *) echo "unknown stage $stage" >&2 ;;
  esac
done
tar -czf "$OUT/suite.tar.gz" -C "$OUT" suite
