"""When each DistributedDataParallel gradient bucket is ready during the backward pass, as a fraction of it.

    python research/2026-12-02-h200x1/scripts/bucket_ready.py --models llama3.2-1b --out /tmp/x          # one GPU
    python research/2026-12-02-h200x1/scripts/bucket_ready.py --models llama3.2-1b,PATH/config.json --micro-batch 1 --seq-len 8192 \
        --device cuda --warmup 3 --steps 5 --out DIR
    # CPU smoke test (gloo): --models tiny --device cpu --seq-len 64 --warmup 1 --steps 2 [--bucket-cap-mb 0.05]
    # (tiny fits one 25 MB bucket; on a machine of few cores OMP_NUM_THREADS=1 keeps gloo's thread from
    # contending with the compute threads, which otherwise stretches the backward tenfold)

One process, world size 1 (nccl on cuda, gloo on cpu). Each model is built, wrapped and stepped as
`topowise bench train` runs strategy ddp (topowise.measure.steps and .strategies): fp32 parameters,
torch.autocast(bf16), DDP(gradient_as_bucket_view=True) with its default buckets, fp32 loss over the bf16
logits of bench train's synthetic batches, fused AdamW, zero_grad. A DDP comm hook marks each bucket
when DDP hands it to the all-reduce (a CUDA event on the current stream, which the GPU reaches once
the bucket's last gradient kernel is done; perf_counter on cpu), then runs DDP's default all-reduce.
DDP launches buckets in index order, so a bucket's mark is when it and every bucket before it are
ready: the moment its all-reduce can start, which is what a cost model's overlap needs. After the
first iteration DDP rebuilds its buckets in the order the gradients became ready, so the warm-up
(at least one step) comes first; each bucket's first and last parameter names show that order.

Per bucket: ready_fraction = (mark - backward start) / (backward end - backward start), the median
over the timed steps (each synchronised after it), with the events before and after loss.backward()
as the backward's start and end (the end includes the last bucket's all-reduce, which backward()
waits for). Appends one JSON line per model to DIR/bucket_ready.jsonl (a failure, out of memory
included, is a line with status "error") and prints a table last. Exit status 2 on bad input, 1 when
no model finished.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import socket
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook  # noqa: E402

from topowise.errors import UsageError  # noqa: E402
from topowise.measure import strategies as S  # noqa: E402
from topowise.measure.rank import Rank, destroy_process_group, init_distributed  # noqa: E402
from topowise.measure.steps import describe_failure, prepare_case, synthetic_batches  # noqa: E402
from topowise.measure.train import TrainCase, validate_sizes  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402
from topowise.run import Run  # noqa: E402

RESULTS_FILE = "bucket_ready.jsonl"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        fail(message)


def fail(message: str):
    """Bad input: one line on stderr, exit status 2 (argparse's own status, without the usage text)."""
    sys.stderr.write(f"bucket_ready: error: {message}\n")
    raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True,
                        help="comma-separated presets (llama3.2-1b, ...) or paths to Hugging Face config.json files")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when a GPU is seen")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first; at least 1 (DDP's bucket rebuild)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps: each bucket's median over them")
    parser.add_argument("--bucket-cap-mb", type=float, default=S.DDP_BUCKET_CAP_MB,
                        help="DDP's bucket_cap_mb (default: DDP's own, as bench train); a small one splits a tiny "
                             "model into buckets")
    parser.add_argument("--seed", type=int, default=TrainCase.seed)
    parser.add_argument("--out", required=True, help=f"folder for {RESULTS_FILE} (appended to)")
    return parser.parse_args(argv)


def make_cases(args: argparse.Namespace) -> list[tuple[str, TrainCase]]:
    """(the name as given, its bench-train ddp case) for every model, each validated as bench train does."""
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    if not names:
        raise UsageError("--models names no model")
    if args.warmup < 1:
        raise UsageError(f"--warmup must be at least 1 (DDP rebuilds its buckets after the first step), "
                         f"not {args.warmup}")
    if args.bucket_cap_mb is not None and not args.bucket_cap_mb > 0:
        raise UsageError(f"--bucket-cap-mb must be positive, not {args.bucket_cap_mb:g}")
    cases = []
    for name in names:
        spec = load_model(name)
        if spec.family not in ("llama", "gpt2"):  # a module:function model has no ModelSpec to build from
            raise UsageError(f"{name}: model family {spec.family!r} is not built here; llama and gpt2 are")
        validate_sizes(spec, seq_len=args.seq_len, steps=args.steps,
                       warmup=args.warmup, nproc=1, timeout_s=1.0)
        run = Run(spec, (0,), "ddp", micro_batch=args.micro_batch, seq_len=args.seq_len)
        cases.append((name, TrainCase(run, steps=args.steps, warmup=args.warmup, device=args.device,
                                      seed=args.seed)))
    return cases


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_single_process_group(device: str) -> Rank:
    """World size 1 through bench train's own join (env://): rank 0 on a free local port; under torchrun
    (one process), its rendezvous as it set it. NCCL's variables are left as they are."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                          LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    return init_distributed("nccl" if device == "cuda" else "gloo")


class BucketClock:
    """The comm hook's state: when each bucket reached DDP's all-reduce in the current backward."""

    def __init__(self, names: dict[int, str], cuda: bool):
        self.names, self.cuda = names, cuda
        self.process_group = None  # the default group, as DDP's own all-reduce
        self.buckets: list[dict] = []  # this backward's buckets, in the order DDP launched them
        self.marks: list = []  # each one's event (cuda) or perf_counter seconds
        self.begin = self.end = None

    def now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after every kernel queued so far
        return event

    def start_backward(self) -> None:
        self.buckets, self.marks = [], []
        self.begin = self.now()

    def end_backward(self) -> None:
        self.end = self.now()

    def read_ms(self) -> tuple[list[float], float]:
        """(each bucket's mark, the backward's end) in ms after its start; waits for the GPU."""
        if self.cuda:
            torch.cuda.synchronize()
            return [self.begin.elapsed_time(m) for m in self.marks], self.begin.elapsed_time(self.end)
        return [(m - self.begin) * 1e3 for m in self.marks], (self.end - self.begin) * 1e3


def mark_bucket(clock: BucketClock, bucket):
    """DDP comm hook: mark the bucket, then DDP's default all-reduce, so training runs as without the hook.

    No annotations: DDP compares them with the real types, and postponed annotations are strings."""
    clock.marks.append(clock.now())  # first: on cpu the time is taken as the hook is reached
    params = bucket.parameters()
    buffer = bucket.buffer()
    clock.buckets.append({"index": bucket.index(), "bytes": buffer.numel() * buffer.element_size(),
                          "params": len(params), "first": clock.names.get(id(params[0]), "?"),
                          "last": clock.names.get(id(params[-1]), "?")})
    return allreduce_hook(clock.process_group, bucket)


def measure(case: TrainCase, rank: Rank, bucket_cap_mb: float) -> dict:
    """bench train's ddp step, warm-up then timed steps; per bucket the median ready time over the timed steps."""
    device_type = "cuda" if case.device == "cuda" else "cpu"
    _measured_peak, model = prepare_case(case, rank)  # bench train's model: seed, TF32 flags, no checkpointing
    # bucket.parameters() hands back the model's own Parameter objects: identity finds their names
    names = {id(p): name for name, p in model.named_parameters()}
    ddp = S.apply_ddp(model, device_type=device_type, bucket_cap_mb=bucket_cap_mb)
    optimizer = S.make_optimizer(ddp.parameters(), lr=case.lr, weight_decay=case.weight_decay,
                                 device_type=device_type)
    clock = BucketClock(names, device_type == "cuda")
    ddp.register_comm_hook(clock, mark_bucket)  # before the first backward, as DDP requires
    inputs, targets = synthetic_batches(case, rank.rank, case.run.model.vocab_size, rank.device)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16) if case.run.spec.autocast else nullcontext()
    timed = []
    gc.collect()
    gc.disable()  # as bench train's loop: no collector pauses inside a step
    try:
        for step in range(case.warmup + case.steps):
            with autocast:
                logits = ddp(inputs[step])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets[step].flatten())
            del logits
            clock.start_backward()
            loss.backward()
            clock.end_backward()
            optimizer.step()
            ddp.zero_grad(set_to_none=True)
            if step >= case.warmup:
                marks, backward_ms = clock.read_ms()
                timed.append((clock.buckets, marks, backward_ms))
    finally:
        gc.enable()
    return summarise(timed)


def summarise(timed: list[tuple[list[dict], list[float], float]]) -> dict:
    """Median over the timed steps, bucket by bucket (every timed step must launch the same buckets)."""
    layout = [(b["index"], b["bytes"]) for b in timed[0][0]]
    if any([(b["index"], b["bytes"]) for b in buckets] != layout for buckets, _, _ in timed):
        raise RuntimeError("DDP's buckets changed between timed steps: more warm-up steps needed")
    backward = [ms for _, _, ms in timed]
    buckets = []
    for k, bucket in enumerate(timed[0][0]):
        fractions = [marks[k] / ms for _, marks, ms in timed]
        buckets.append(dict(bucket, ready_fraction=statistics.median(fractions),
                            ready_ms=statistics.median(marks[k] for _, marks, _ in timed)))
    return {"backward_ms": statistics.median(backward), "backward_ms_steps": backward, "buckets": buckets}


def release_memory() -> None:
    gc.collect()  # DDP's reducer and hook hold the model in reference cycles
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<24} {'buckets':>7} {'backward ms':>11} {'first':>6} {'2nd last':>8} {'last':>6}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['model'][-24:]:<24} {'error: ' + r['error']}"[:120])
            continue
        f = [b["ready_fraction"] for b in r["buckets"]]
        before_last = f"{f[-2]:.3f}" if len(f) > 1 else "-"
        print(f"{r['model'][-24:]:<24} {len(f):>7} {r['backward_ms']:>11.1f} {f[0]:>6.3f} {before_last:>8} "
              f"{f[-1]:>6.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but no CUDA GPU is visible here: use --device cpu")
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        fail("this benchmark runs as one process (world size 1)")
    try:
        cases = make_cases(args)
    except UsageError as exc:
        fail(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = join_single_process_group(args.device)
    cuda = args.device == "cuda"
    rows = []
    for name, case in cases:
        record = {"model": name, "model_name": case.run.model.name, "params": case.run.model.params,
                  "micro_batch": case.run.micro_batch, "seq_len": case.run.seq_len, "device": args.device,
                  "world_size": rank.world_size, "bucket_cap_mb": args.bucket_cap_mb, "warmup": case.warmup,
                  "steps": case.steps, "gpu_name": torch.cuda.get_device_name() if cuda else None,
                  "torch_version": torch.__version__,
                  "utc_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        try:
            record.update(status="ok", **measure(case, rank, args.bucket_cap_mb))
        except Exception as exc:  # noqa: BLE001 - recorded (out of memory too); the next model still runs
            record.update(status="error", error=describe_failure(exc)["error"])
        release_memory()
        rows.append(record)
        with (out / RESULTS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps({k: record.get(k) for k in ("model", "status", "backward_ms", "error") if k in record}),
              flush=True)
    destroy_process_group()
    print_table(rows)
    return 0 if any(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
