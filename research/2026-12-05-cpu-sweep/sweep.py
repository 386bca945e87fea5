"""Hostile and careless invocations of the `topowise` CLI, each judged by its exit status and stderr.

A one-off study script, never imported by the package. Usage (from a fresh clone, no torch):

    python3 research/2026-12-05-cpu-sweep/sweep.py --topowise CLONE/.venv/bin/topowise --repo CLONE \
        --out research/2026-12-05-cpu-sweep/records/NAME.jsonl [--jobs 2] [--only SUBSTRING]

Every case runs with a 60 s timeout, stdin closed, in a fresh temp folder, MPLBACKEND=Agg and no GPU visible.
Verdicts: "one-line error" (exit 2, exactly one stderr line starting "topowise: error:"), "ok" (exit 0, the case
is legitimate), "traceback", "hang" (timeout), "accepted nonsense" (exit 0 on a case marked nonsense), "other"
(anything else; the record says what).
"""

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 60
PREDICT = ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"]
PREDICT8 = ["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8", "--strategy", "zero3"]
PLAN = ["plan", "--model", "tiny", "--topology", "h200-x2"]
NCCL = ["nccl-tests", "--topology", "hgx-h100-8"]


@dataclass(frozen=True)
class Case:
    argv: tuple
    nonsense: bool  # exit 0 on it would be "accepted nonsense"
    why: str = ""


def legit(*argv, why=""):
    return Case(argv=tuple(argv), nonsense=False, why=why)


def bad(*argv, why=""):
    return Case(argv=tuple(argv), nonsense=True, why=why)


# ---------------------------------------------------------------------------------------------- fixtures

def _run_json(topowise, argv):
    out = subprocess.run([topowise, *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         timeout=TIMEOUT_S, env=_env(), check=True)
    return out.stdout


def _write(path: Path, data) -> None:
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def make_fixtures(folder: Path, topowise: str, repo: Path) -> None:
    """Every file the cases name, under `folder` (the {F} of an argv)."""
    f = folder
    _write(f / "deep.json", '{"a":' * 100_000 + "1" + "}" * 100_000)
    _write(f / "deeplist.json", "[" * 100_000 + "]" * 100_000)
    _write(f / "empty.json", "")
    _write(f / "empty.txt", "")
    _write(f / "garbage.json", "not json {")
    _write(f / "list.json", "[1, 2, 3]")
    _write(f / "null.json", "null")
    _write(f / "number.json", "42")
    _write(f / "string.json", '"hello"')
    _write(f / "object.json", "{}")
    (f / "binary.bin").write_bytes(bytes(range(256)) * 64)
    (f / "folder").mkdir()
    (f / "no-config").mkdir()
    (f / "ünïcödé 模型 dir").mkdir()

    # topology JSON as `topo --json` writes it, then edited by hand
    topo = json.loads(_run_json(topowise, ["topo", "--preset", "h200-x2", "--json"]))
    _write(f / "h200x2.json", topo)
    _write(f / "ünïcödé 模型 dir" / "topo 拓扑.json", topo)

    def edited(name, change):
        data = json.loads(json.dumps(topo))
        change(data)
        (f / f"{name}.json").write_text(json.dumps(data))  # json.dumps writes NaN/Infinity as Python reads them

    def pair(**kw):
        return lambda d: d["pairs"][0].update(kw)

    def gpu(**kw):
        return lambda d: d["gpus"][0].update(kw)

    edited("t-gpu42", pair(b=42))
    edited("t-self", pair(b=0, a=0))
    edited("t-neglink", pair(gbps=-5.0))
    edited("t-nanlink", pair(gbps=float("nan")))
    edited("t-inflink", pair(gbps=float("inf")))
    edited("t-zerolink", pair(gbps=0))
    edited("t-hugelink", pair(gbps=1e30))
    edited("t-strlink", pair(gbps="fast"))
    edited("t-nv999", pair(nvlinks=999))
    edited("t-nvneg", pair(nvlinks=-1))
    edited("t-warp", pair(kind="WARP"))
    edited("t-negmem", gpu(memory_bytes=-1))
    edited("t-nanmem", gpu(memory_bytes=float("nan")))
    edited("t-hugemem", gpu(memory_bytes=1e40))
    edited("t-strmem", gpu(memory_bytes="80GB"))
    edited("t-twice", lambda d: d["gpus"][1].update(index=0))
    edited("t-negindex", gpu(index=-3))
    edited("t-strindex", gpu(index="zero"))
    edited("t-nogpus", lambda d: d.update(gpus=[], pairs=[], islands=[]))
    edited("t-nopairs", lambda d: d.pop("pairs"))
    edited("t-gpusdict", lambda d: d.update(gpus={"0": 1}))
    edited("t-unknowngpu", gpu(name="NVIDIA WarpCore 9000"))
    edited("t-unicodename", lambda d: d.update(name="机器 🚀"))
    edited("t-extra", lambda d: d.update(flux_capacitor=True))
    edited("t-pairnull", lambda d: d["pairs"].append(None))

    # `nvidia-smi topo -m` text
    smi = (repo / "tests" / "unit" / "data" / "17_h200-x2_nv18.txt").read_text()
    _write(f / "smi.txt", smi)
    _write(f / "smi-nv999.txt", smi.replace("NV18", "NV999"))
    _write(f / "smi-nv0.txt", smi.replace("NV18", "NV0"))
    _write(f / "smi-half.txt", smi[: len(smi) // 2])
    _write(f / "smi-unicode.txt", smi.replace("GPU0", "GPU０"))
    big = (repo / "tests" / "unit" / "data" / "01_h100-sxm-x8_nvswitch_no-nics.txt").read_text()
    _write(f / "smi8.txt", big)

    # symlinks
    os.symlink(f / "h200x2.json", f / "link-good.json")
    os.symlink(f / "nowhere.json", f / "link-dangling.json")
    os.symlink(f / "link-loop-b.json", f / "link-loop-a.json")
    os.symlink(f / "link-loop-a.json", f / "link-loop-b.json")
    os.symlink("/etc/shadow", f / "link-shadow.json")
    os.symlink("/dev/zero", f / "link-zero.json")

    # model config.json
    cfg = json.loads((repo / "tests" / "data" / "configs" / "smollm2-135m.json").read_text())
    (f / "model-ok").mkdir()
    _write(f / "model-ok" / "config.json", cfg)

    def model(name, **change):
        _write(f / f"cfg-{name}.json", {**cfg, **change})

    model("neghidden", hidden_size=-576)
    model("zerolayers", num_hidden_layers=0)
    model("nanhidden", hidden_size=float("nan"))
    model("strlayers", num_hidden_layers="thirty")
    model("hugevocab", vocab_size=10**15)
    model("floatheads", num_attention_heads=8.5)
    model("badkv", num_key_value_heads=4)  # 9 heads do not split into 4 groups
    model("zeroheads", num_attention_heads=0)
    _write(f / "cfg-nokeys.json", {"model_type": "llama"})

    # a saved plan and hand-edited copies
    subprocess.run([topowise, *PLAN, "--save-plan", str(f / "plan.json")], capture_output=True,
                   stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, env=_env(), check=True)
    plan = json.loads((f / "plan.json").read_text())

    def plan_edit(name, change):
        data = json.loads(json.dumps(plan))
        change(data)
        _write(f / f"plan-{name}.json", data)

    plan_edit("gpuneg", lambda d: d["plan"].update(gpus=[-1, 1]))
    plan_edit("gpu99", lambda d: d["plan"].update(gpus=[0, 99]))
    plan_edit("gpustr", lambda d: d["plan"].update(gpus="0,1"))
    plan_edit("noplan", lambda d: d.pop("plan"))
    plan_edit("strategy", lambda d: d["plan"].update(strategy="warp"))
    plan_edit("mb0", lambda d: d["plan"].update(micro_batch=0))
    plan_edit("gpusempty", lambda d: d["plan"].update(gpus=[]))

    # cost-model and model profiles
    shutil.copy(repo / "tests" / "data" / "records" / "2026-11-30-h200x2" / "run10" / "profile.json",
                f / "profile-h200.json")
    mp = json.loads((repo / "tests" / "data" / "records" / "2026-12-01-h200x1" / "model-profile" /
                     "profile-vit-128.json").read_text())
    _write(f / "mprofile-vit.json", mp)
    _write(f / "mprofile-badformat.json", {**mp, "format": "something.else"})
    _write(f / "mprofile-negparams.json", {**mp, "model": {**mp["model"], "params": -5}})

    # monitor run folders
    def run_dir(name, world=2, steps=12, skip_rank=None, mutate=None):
        d = f / name
        d.mkdir()
        for rank in range(world):
            if rank == skip_rank:
                continue
            lines = [{"kind": "start", "rank": rank, "world_size": world, "collective": "the gradient all-reduce",
                      "predicted_step_s": 0.1}]
            for step in range(steps):
                slow = step == 9
                times = [0.35, 0.1] if slow else [0.1, 0.1]
                waits = [0.25, 0.0] if slow else [0.0, 0.0]
                rec = {"kind": "step", "step": step, "rank": rank, "world_size": world, "judged": step >= 3,
                       "step_time_s": times[rank], "wait_s": waits[rank], "slowest_rank": 1 if slow else 0,
                       "slow_by_s": 0.25 if slow else 0.0, "late_at": "start",
                       "collective": "the gradient all-reduce", "step_times_s": times, "waits_s": waits,
                       "spike": {"step_time": slow and rank == 0, "wait": slow and rank == 0}}
                if mutate:
                    mutate(rec)
                lines.append(rec)
            (d / f"monitor.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    run_dir("run-ok")
    run_dir("run-norank0", skip_rank=0)
    run_dir("run-nan", mutate=lambda r: r.update(step_time_s=float("nan")))
    run_dir("run-neg", mutate=lambda r: r.update(step_time_s=-1.0))
    run_dir("run-str", mutate=lambda r: r.update(step_time_s="slow"))
    run_dir("run-rank99", mutate=lambda r: r.update(slowest_rank=99))
    (f / "run-garbage").mkdir()
    _write(f / "run-garbage" / "monitor.rank0.jsonl", "not json\n{\n")
    (f / "run-emptyfiles").mkdir()
    _write(f / "run-emptyfiles" / "monitor.rank0.jsonl", "")
    _write(f / "run-emptyfiles" / "monitor.rank1.jsonl", "")
    (f / "run-deep").mkdir()
    _write(f / "run-deep" / "monitor.rank0.jsonl", '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")

    # flight-recorder dumps
    shutil.copytree(repo / "tests" / "data" / "flight_recorder" / "stuck_all_gather", f / "hang-ok")
    (f / "hang-garbage").mkdir()
    for r in range(2):
        (f / "hang-garbage" / f"nccl_trace_rank_{r}").write_bytes(b"\x80\x04garbage" * 10)
    (f / "hang-one").mkdir()
    shutil.copy(f / "hang-ok" / "nccl_trace_rank_0", f / "hang-one" / "nccl_trace_rank_0")

    # doctor snapshots
    doc = repo / "tests" / "data" / "doctor"
    shutil.copy(doc / "healthy_hgx_h100.json", f / "snap-ok.json")
    shutil.copy(doc / "fault_nvlink_down.json", f / "snap-fault.json")

    # nccl-tests output
    nccl = (repo / "tests" / "data" / "nccl_tests" / "h100x2-1gpu-per-node-tree_nccl-tests-232.txt").read_text()
    row = ("     2097152        524288     float     sum      -1    113.2   18.53   18.53      0    93.35   22.46   "
           "22.46      0")
    _write(f / "nccl-ok.txt", nccl)
    _write(f / "nccl-negtime.txt", nccl.replace(row, row.replace("113.2", "-113.2")))
    _write(f / "nccl-infbus.txt", nccl.replace(row, row.replace("18.53   18.53", "18.53     inf")))
    _write(f / "nccl-nanbus.txt", nccl.replace(row, row.replace("18.53   18.53", "18.53     nan")))
    _write(f / "nccl-huge.txt", nccl.replace(row, row.replace("     2097152", "100000000000000000000000000")))
    _write(f / "nccl-header.txt", "\n".join(x for x in nccl.splitlines() if x.startswith("#")))

    # measured records for validate
    shutil.copy(repo / "tests" / "data" / "records" / "2026-12-02-h200x1" / "unseen" / "run27" / "train.jsonl",
                f / "train-ok.jsonl")
    _write(f / "train-garbage.jsonl", "nope\n")
    _write(f / "train-nan.jsonl", json.dumps({"kind": "train", "strategy": "ddp", "model": "tiny", "world_size": 2,
                                              "status": "ok", "step_time_s": float("nan")}) + "\n")


# ---------------------------------------------------------------------------------------------- cases

def cases() -> list:
    c = []
    F = "{F}"

    # --- no verb, global flags
    c += [legit("--version"), bad(), bad("nonsense-verb"), bad("--nonsense"), bad("predict"),
          bad("bench"), bad("monitor")]

    # --- env
    c += [legit("env"), legit("env", "--json"), legit("env", "--no-torch"), legit("env", "--json", "--no-torch"),
          bad("env", "--bogus"), bad("env", "extra-positional")]

    # --- topo: presets, clusters, absurd sizes
    c += [legit("topo", "--list-presets"), legit("topo", "--preset", "hgx-h100-8"),
          legit("topo", "--preset", "dgx-a100-8", "--json"), legit("topo", "--preset", "2x hgx-h100-8+ib-ndr"),
          legit("topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=4"),
          bad("topo", "--preset", "no-such-machine"), bad("topo", "--preset", ""),
          bad("topo", "--preset", "hgx‐h100‐8", why="unicode hyphens"),
          bad("topo", "--preset", "hgx-h100-8\n--json"),
          bad("topo", "--preset", "100000000x hgx-h100-8+ib-ndr"),
          bad("topo", "--preset", "1e9x hgx-h100-8+ib-ndr"),
          bad("topo", "--preset", "0x hgx-h100-8+ib-ndr"), bad("topo", "--preset", "-2x hgx-h100-8+ib-ndr"),
          bad("topo", "--preset", "nanx hgx-h100-8+ib-ndr"), bad("topo", "--preset", "2x hgx-h100-8+warp-drive"),
          bad("topo", "--preset", "2x nonsense+ib-ndr"), bad("topo", "--preset", "2x hgx-h100-8+ib-ndrx0"),
          bad("topo", "--preset", "2x hgx-h100-8+ib-ndrx1000"), bad("topo", "--preset", "2x hgx-h100-8+ib-ndrx-1"),
          bad("topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=0"),
          bad("topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=-4"),
          bad("topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=4,rail=0"),
          bad("topo", "--preset", "16x hgx-h100-8+ib-ndr/bogus=3"),
          bad("topo", "--preset", "2x hgx-h100-8+ib-ndr+ib-ndr"),
          bad("topo", "--preset", "hgx-h100-8", "--file", F + "/h200x2.json", why="two sources"),
          legit("topo", "--preset", "1000x hgx-h100-8+ib-ndr", why="1000 nodes: the issue asks for seconds"),
          ]
    # topo --file
    c += [legit("topo", "--file", F + "/h200x2.json"), legit("topo", "--file", F + "/smi.txt", "--gpu-name", "H200"),
          legit("topo", "--file", F + "/link-good.json"),
          legit("topo", "--file", F + "/ünïcödé 模型 dir/topo 拓扑.json"),
          legit("topo", "--file", F + "/t-extra.json", why="an unknown extra key is ignored"),
          legit("topo", "--file", F + "/t-unicodename.json")]
    for name in ["deep", "deeplist", "empty", "garbage", "list", "null", "object"]:
        c.append(bad("topo", "--file", f"{F}/{name}.json"))
    for name in ["empty.txt", "binary.bin", "folder", "no-such-file.json", "link-dangling.json", "link-loop-a.json",
                 "link-shadow.json", "smi-nv999.txt", "smi-nv0.txt", "smi-half.txt", "smi-unicode.txt"]:
        c.append(bad("topo", "--file", f"{F}/{name}"))
    c.append(bad("topo", "--file", "/dev/zero", why="endless input"))
    c.append(bad("topo", "--file", F + "/link-zero.json", why="symlink to /dev/zero"))
    c.append(bad("topo", "--file", F + "/smi.txt", why="topo -m text without --gpu-name"))
    c.append(bad("topo", "--file", F + "/smi.txt", "--gpu-name", "WarpCore"))
    for name in ["t-gpu42", "t-self", "t-neglink", "t-nanlink", "t-inflink", "t-zerolink", "t-hugelink", "t-strlink",
                 "t-nv999", "t-nvneg", "t-warp", "t-negmem", "t-nanmem", "t-hugemem", "t-strmem", "t-twice",
                 "t-negindex", "t-strindex", "t-nogpus", "t-nopairs", "t-gpusdict", "t-unknowngpu", "t-pairnull"]:
        c.append(bad("topo", "--file", f"{F}/{name}.json"))
    # topo --gpus
    c.append(legit("topo", "--preset", "hgx-h100-8", "--gpus", "0-3"))
    for sel in ["0,0", "-1", "0-99", "", "3-1", "٠,١", "8", "1e3"]:
        c.append(bad("topo", "--preset", "hgx-h100-8", "--gpus", sel))

    # --- predict: numbers of every kind on every numeric flag
    c += [legit(*PREDICT), legit(*PREDICT, "--json"), legit(*PREDICT8),
          legit(*PREDICT8, "--tp", "2", "--pp", "2"),
          legit(*PREDICT, "--model", F + "/model-ok"), legit(*PREDICT, "--model", F + "/model-ok/config.json"),
          legit(*PREDICT, "--topology", F + "/h200x2.json"), legit(*PREDICT, "--topology", F + "/link-good.json"),
          legit(*PREDICT, "--profile", F + "/profile-h200.json"),
          legit(*PREDICT, "--gpu-hour-usd", "2.5")]
    values = ["-1", "nan", "99999999999999999999"]
    for flag in ["--micro-batch", "--seq-len", "--num-gpus", "--tp", "--grad-accum", "--power-limit", "--gpu-hour-usd",
                 "--virtual-stages", "--cp"]:
        for v in values:
            c.append(bad(*PREDICT, flag, v))
    c += [bad(*PREDICT, "--micro-batch", "0"), bad(*PREDICT, "--seq-len", "0"), bad(*PREDICT, "--num-gpus", "0"),
          bad(*PREDICT, "--micro-batch", "abc"), bad(*PREDICT, "--seq-len", "1.5"), bad(*PREDICT, "--tp", "")]
    for flag in ["--pp", "--shard-group-size"]:
        for v in ["-1", "0", "1e308"]:
            c.append(bad(*PREDICT, flag, v))
    # predict: names
    c += [bad(*PREDICT, "--model", "no-such-model"), bad(*PREDICT, "--model", "llama😀"),
          bad(*PREDICT, "--model", ""), bad(*PREDICT, "--topology", "no-such-topology"),
          bad(*PREDICT, "--strategy", "warp"), bad(*PREDICT, "--strategy", ""),
          bad(*PREDICT, "--fabric", "carrier-pigeon"), bad(*PREDICT, "--loss", "nonsense"),
          bad(*PREDICT, "--attention", "nonsense"), bad(*PREDICT, "--precision", "fp4"),
          bad(*PREDICT, "--engine", "tensorflow"), bad(*PREDICT, "--pp-schedule", "gpipe-ish"),
          bad(*PREDICT, "--network", "warp-drive"), bad(*PREDICT, "--network", ""),
          bad(*PREDICT, "--network-node-hour-usd", "ib-ndr=-1"),
          bad(*PREDICT, "--network-node-hour-usd", "warp=1"),
          bad(*PREDICT, "--network-node-hour-usd", "garbage"),
          bad(*PREDICT, "--gpu-name", "H100", why="--gpu-name without topo -m text")]
    # predict: files
    for flag in ["--model", "--topology", "--profile", "--model-profile"]:
        for name in ["deep.json", "list.json", "folder"]:
            c.append(bad(*PREDICT, flag, f"{F}/{name}"))
    c.append(bad(*PREDICT, "--model", F + "/no-config"))
    for name in ["neghidden", "zerolayers", "nanhidden", "strlayers", "hugevocab", "badkv", "nokeys"]:
        c.append(bad(*PREDICT, "--model", f"{F}/cfg-{name}.json"))
    for name in ["t-gpu42", "t-inflink", "t-hugelink", "t-strlink", "t-hugemem", "t-nogpus"]:
        c.append(bad(*PREDICT, "--topology", f"{F}/{name}.json"))
    c += [bad(*PREDICT, "--model-profile", F + "/mprofile-vit.json", why="a ViT's profile applied to tiny"),
          bad(*PREDICT, "--model-profile", F + "/mprofile-badformat.json"),
          bad(*PREDICT, "--model-profile", F + "/mprofile-negparams.json")]
    # predict: flags that contradict each other
    c += [bad(*PREDICT8, "--tp", "3", why="--tp 3 on 8 GPUs"),
          bad(*PREDICT8, "--tp", "16"), bad(*PREDICT8, "--pp", "33", why="--pp above llama3.1-8b's 32 layers"),
          bad(*PREDICT, "--pp", "64", why="--pp above tiny's layers"),
          bad(*PREDICT8, "--precision", "fp8", "--topology", "dgx-a100-8", why="fp8 on an A100"),
          bad(*PREDICT8, "--cp", "2", "--seq-len", "4097", why="--cp with an odd sequence"),
          bad(*PREDICT8, "--cp", "3"), bad(*PREDICT8, "--grad-accum", "0"),
          bad(*PREDICT8, "--power-limit", "5"), bad(*PREDICT8, "--power-limit", "100000"),
          bad(*PREDICT8, "--num-gpus", "9"), bad(*PREDICT8, "--gpus", "0,1", "--num-gpus", "8"),
          bad(*PREDICT[:-4], "--gpus", "0,0", "--strategy", "ddp"),
          bad(*PREDICT[:-4], "--gpus", "0-99", "--strategy", "ddp"),
          bad(*PREDICT8, "--strategy", "hsdp", "--shard-group-size", "3"),
          bad(*PREDICT8, "--strategy", "ddp", "--shard-group-size", "2", why="shard groups without hsdp"),
          bad(*PREDICT8, "--pp-schedule", "interleaved-1f1b", why="a schedule without --pp"),
          bad(*PREDICT8, "--pp", "2", "--virtual-stages", "3", why="virtual stages without interleaved"),
          bad(*PREDICT8, "--precision", "bf16", "--fp8-recipe", "rowwise", why="an fp8 recipe with bf16"),
          bad(*PREDICT8, "--activation-checkpointing", "--checkpointing", "none"),
          bad(*PREDICT8, "--checkpointing", "selective", "--selective-ac-option", "0"),
          bad(*PREDICT8, "--checkpointing", "selective", "--selective-ac-option", "-2"),
          legit(*PREDICT8, "--checkpointing", "selective", "--selective-ac-option", "op"),
          bad(*PREDICT8, "--checkpointing", "full", "--selective-ac-option", "2"),
          bad(*PREDICT8, "--engine", "deepspeed", "--tp", "2", why="DeepSpeed ZeRO with TP"),
          bad(*PREDICT8, "--fabric", "pcie", "--topology", "pcie-l40s-8"),
          bad(*PREDICT8, "--tp", "2", "--no-sequence-parallel", "--cp", "2", "--pp", "2", "--grad-accum", "1",
              why="pp 2 with one micro-batch"),
          bad(*PREDICT, "--seq-len", "1", why="one token"),
          bad(*PREDICT8, "--topology", "100000000x hgx-h100-8+ib-ndr", "--num-gpus", "800000000")]

    # --- plan
    c += [legit(*PLAN), legit(*PLAN, "--json"), legit(*PLAN, "--export", "torchrun"),
          legit(*PLAN, "--export", "deepspeed", "--out", "ds.json"),
          legit("plan", "--model", "llama3.1-8b", "--topology", "2x hgx-h100-8+ib-ndr", "--mesh"),
          legit("plan", "--model", "llama3.1-8b", "--topology", "hgx-h100-8",
                "--network", "ib-ndr,roce-400,eth-100,eth-10"),
          legit("plan", "--model", "llama3.1-8b", "--topology", "1000x hgx-h100-8+ib-ndr",
                why="1000 nodes: the issue asks for seconds"),
          legit("plan", "--model", "llama3.1-70b", "--topology", "1000x hgx-h100-8+ib-ndr", "--mesh",
                why="1000 nodes with the mesh"),
          bad("plan", "--model", "llama3.1-8b", "--topology", "100000000x hgx-h100-8+ib-ndr"),
          bad("plan", "--model", "llama3.1-70b", "--topology", "pcie-l40s-8", "--num-gpus", "1",
              "--export", "torchrun", why="--export with nothing fitting"),
          bad("plan", "--model", "llama3.1-70b", "--topology", "pcie-l40s-8", "--num-gpus", "1",
              "--export", "deepspeed", "--out", "ds.json", why="--export with nothing fitting"),
          bad("plan", "--model", "llama3.1-70b", "--topology", "pcie-l40s-8", "--num-gpus", "1",
              "--save-plan", "p.json", why="--save-plan with nothing fitting"),
          bad(*PLAN, "--export", "kubernetes"), bad(*PLAN, "--out", "x.json", why="--out without --export"),
          bad(*PLAN, "--export", "torchrun", "--out", "{F}/folder"),
          bad(*PLAN, "--export", "torchrun", "--out", "/nonexistent/dir/x.sh"),
          bad(*PLAN, "--save-plan", "{F}/folder"), bad(*PLAN, "--save-plan", "/nonexistent/dir/p.json"),
          bad(*PLAN, "--global-batch", "8", why="--global-batch without --mesh"),
          bad(*PLAN, "--wan-share", "0.5", why="--wan-share on one node"),
          bad(*PLAN, "--gpus", "0,1", "--num-gpus", "1")]
    for flag in ["--top", "--micro-batch", "--num-gpus", "--seq-len", "--global-batch", "--wan-share", "--power-limit"]:
        for v in ["-1", "0", "nan"]:
            extra = ["--mesh"] if flag == "--global-batch" else []
            c.append(bad(*PLAN, *extra, flag, v))
    c += [bad(*PLAN, "--wan-share", "1.5"), bad(*PLAN, "--model", F + "/deep.json"),
          bad(*PLAN, "--topology", F + "/deep.json"), bad(*PLAN, "--profile", F + "/deep.json"),
          bad(*PLAN, "--model-profile", F + "/deep.json"), bad(*PLAN, "--model", "no.such.module:build"),
          bad(*PLAN, "--model", "os:system", why="a module:function that is no model"),
          bad(*PLAN, "--model", ":"), bad(*PLAN, "--precision", "fp8", "--topology", "dgx-a100-8"),
          bad(*PLAN, "--topology", F + "/t-nanlink.json"), bad(*PLAN, "--loss", "nonsense"),
          bad(*PLAN, "--attention", "nonsense")]

    # --- study (tiny and one topology only; the full default is the quick start's 43 s)
    STUDY = ["study", "--model", "tiny", "--topologies", "h200-x2", "--no-network-questions"]
    c += [legit(*STUDY, "--out", "out"), legit(*STUDY, "--json", "--out", "out"),
          legit(*STUDY, "--out", "ünï 模型"),
          bad(*STUDY, "--out", "{F}/empty.txt", why="--out is a file"),
          bad(*STUDY, "--out", "/proc/nope"), bad("study", "--model", "tiny", "--topologies", ""),
          bad("study", "--model", "tiny", "--topologies", "nonsense"),
          bad("study", "--model", "tiny", "--topologies", "h200-x2,h200-x2", "--no-network-questions"),
          bad(*STUDY, "--num-gpus", "0"), bad(*STUDY, "--num-gpus", "99"), bad(*STUDY, "--seq-len", "-1"),
          bad(*STUDY, "--micro-batch", "nan"), bad(*STUDY, "--measure", why="measuring without torch"),
          bad(*STUDY, "--trace", why="--trace without --measure"),
          bad(*STUDY, "--measure-steps", "0", "--measure"), bad(*STUDY, "--model", F + "/deep.json"),
          bad(*STUDY, "--profile", F + "/garbage.json"), bad(*STUDY, "--gpu-hour-usd", "-3"),
          bad(*STUDY, "--network", "warp"), bad(*STUDY, "--questions-model", "no-such-model")]

    # --- bench comm / train: without torch every run is refused; with bad settings first or not
    COMM = ["bench", "comm", "--backend", "gloo", "--device", "cpu", "--nproc", "2", "--max-bytes", "1024",
            "--iters", "1", "--warmup", "0", "--timeout", "30"]
    TRAIN = ["bench", "train", "--device", "cpu", "--nproc", "2", "--model", "tiny", "--steps", "1", "--warmup", "0",
             "--seq-len", "16", "--strategies", "ddp", "--timeout", "30"]
    c += [bad(*COMM, why="no torch: refused"), bad(*TRAIN, why="no torch: refused")]
    for flag, vals in [("--nproc", ["0", "100000"]), ("--min-bytes", ["-1", "1e30"]),
                       ("--factor", ["1", "nan"]), ("--dtype", ["int3"]), ("--ops", ["warp"]),
                       ("--iters", ["0"]), ("--timeout", ["nan"]), ("--algo", ["teleport"])]:
        for v in vals:
            c.append(bad(*COMM, flag, v))
    c += [bad(*COMM, "--min-bytes", "4096", why="min above max"), bad(*COMM, "--backend", "nccl"),
          bad(*COMM, "--out", "{F}/folder"), bad(*COMM, "--topology", "{F}/deep.json"),
          bad(*COMM, "--resume", why="--resume without --out")]
    for flag, vals in [("--nproc", ["0", "100000"]), ("--steps", ["0"]), ("--micro-batch", ["0"]),
                       ("--seq-len", ["-16"]), ("--lr", ["nan", "-1"]), ("--timeout", ["-5"]),
                       ("--strategies", ["warp"]), ("--model", ["no-such-model", "{F}/deep.json"]),
                       ("--grad-accum", ["0"]), ("--tp", ["3"]), ("--pp", ["99"])]:
        for v in vals:
            c.append(bad(*TRAIN, flag, v.replace("{F}", F)))
    c += [bad(*TRAIN, "--device", "cuda", why="no GPU here"), bad(*TRAIN, "--out", "{F}/folder"),
          bad(*TRAIN, "--trace", "{F}/empty.txt", why="--trace to a file"),
          bad(*TRAIN, "--engine", "deepspeed", "--tp", "2"),
          bad(*TRAIN, "--checkpointing", "full", "--selective-ac-option", "op")]

    # --- calibrate and validate: refused paths
    c += [bad("calibrate", "--device", "cpu", "--no-cache", why="no torch: refused"),
          legit("calibrate", "--only", "encryption", "--no-cache", "--out", "enc.json",
                why="measures without GPUs or torch"),
          bad("calibrate", "--only", "encryption", "--out", "{F}/folder", "--no-cache"),
          bad("calibrate", "--only", "encryption", "--out", "/nonexistent/dir/p.json", "--no-cache"),
          bad("calibrate", "--only", "teleport"), bad("calibrate", "--from-records", "{F}/folder", "--no-cache"),
          bad("calibrate", "--from-records", "/nonexistent", "--no-cache"),
          bad("calibrate", "--from-records", "{F}/empty.txt", "--no-cache"),
          bad("calibrate", "--fit", "nonsense", "--device", "cpu", "--no-cache"),
          bad("calibrate", "--nproc", "0", "--device", "cpu", "--no-cache"),
          bad("calibrate", "--timeout", "nan", "--device", "cpu", "--no-cache"),
          bad("calibrate", "--device", "cuda", "--no-cache", why="no GPU here"),
          bad("validate", "--measured", "/nonexistent/runs.jsonl"),
          bad("validate", "--measured", "{F}/empty.txt"), bad("validate", "--measured", "{F}/train-garbage.jsonl"),
          bad("validate", "--measured", "{F}/folder"), bad("validate", "--measured", "{F}/train-nan.jsonl"),
          bad("validate", "--measured", "{F}/deep.json"),
          bad("validate", "--device", "cpu", "--no-plot", why="no torch: refused"),
          bad("validate", "--profile", "{F}/garbage.json", "--device", "cpu"),
          bad("validate", "--profile", "{F}/deep.json", "--device", "cpu"),
          bad("validate", "--nproc", "-1", "--device", "cpu"),
          bad("validate", "--measured", "{F}/train-ok.jsonl", "--topology", "no-such-topology"),
          bad("validate", "--measured", "{F}/train-ok.jsonl", "--out", "{F}/folder", "--no-plot")]

    # --- launch --dry-run
    c += [legit("launch", "--plan", "{F}/plan.json", "--dry-run", "--", "python3", "train.py"),
          legit("launch", "--model", "tiny", "--topology", "h200-x2", "--dry-run", "--", "python3", "train.py"),
          bad("launch", "--plan", "{F}/plan.json", "--dry-run", why="no command"),
          bad("launch", "--plan", "{F}/plan.json", "--dry-run", "--"),
          bad("launch", "--dry-run", "--", "train.py", why="neither a plan nor plan flags"),
          bad("launch", "--plan", "{F}/plan.json", "--model", "tiny", "--dry-run", "--", "train.py",
              why="a plan and plan flags"),
          bad("launch", "--plan", "{F}/plan.json", "--", "/nonexistent/binary"),
          bad("launch", "--plan", "{F}/plan.json", "--", "no-such-program-here"),
          bad("launch", "--plan", "{F}/plan.json", "--", "missing_train.py"),
          bad("launch", "--plan", "{F}/plan.json", "--", "python3", "-c", "pass", why="no torchrun without torch"),
          bad("launch", "--plan", "{F}/plan.json", "--snapshot", "{F}/garbage.json", "--dry-run", "--", "train.py"),
          bad("launch", "--plan", "{F}/plan.json", "--snapshot", "{F}/deep.json", "--dry-run", "--", "train.py"),
          bad("launch", "--plan", "{F}/plan.json", "--run-dir", "{F}/empty.txt", "--dry-run", "--", "train.py"),
          bad("launch", "--model", "llama3.1-70b", "--topology", "pcie-l40s-8", "--num-gpus", "1", "--dry-run",
              "--", "train.py", why="nothing fits")]
    for name in ["deep.json", "empty.json", "folder", "link-shadow.json", "plan-gpuneg.json", "plan-gpu99.json",
                 "plan-gpustr.json", "plan-noplan.json",
                 "plan-strategy.json", "plan-mb0.json", "plan-gpusempty.json", "h200x2.json"]:
        c.append(bad("launch", "--plan", f"{F}/{name}", "--dry-run", "--", "train.py"))

    # --- monitor
    c += [legit("monitor", "summarize", "{F}/run-ok", "--no-plot"), legit("monitor", "summarize", "{F}/run-ok",
                                                                          "--plot", "m.png"),
          legit("monitor", "summarize", "{F}/run-ok", "--json", "--no-plot"),
          bad("monitor", "summarize", "{F}/run-norank0", "--no-plot", why="rank 0's file missing"),
          bad("monitor", "summarize", "/nonexistent", "--no-plot"),
          bad("monitor", "summarize", "{F}/folder", "--no-plot"),
          bad("monitor", "summarize", "{F}/empty.txt", "--no-plot"),
          bad("monitor", "summarize", "{F}/run-ok", "--plot", "{F}/folder"),
          bad("monitor", "summarize", "{F}/run-ok", "--plot", "/nonexistent/dir/m.png")]
    for name in ["run-nan", "run-neg", "run-str", "run-rank99", "run-garbage", "run-emptyfiles", "run-deep"]:
        c.append(bad("monitor", "summarize", f"{F}/{name}", "--no-plot"))
    c += [legit("monitor", "hang", "{F}/hang-ok"), legit("monitor", "hang", "{F}/hang-ok", "--json"),
          bad("monitor", "hang", "{F}/folder"), bad("monitor", "hang", "/nonexistent"),
          bad("monitor", "hang", "{F}/hang-garbage"), bad("monitor", "hang", "{F}/empty.txt"),
          legit("monitor", "hang", "{F}/hang-one", why="one rank's dump: what it can say"),
          bad("monitor", "nonsense", "{F}/run-ok")]

    # --- doctor --snapshot
    c += [legit("doctor", "--snapshot", "{F}/snap-ok.json"),
          legit("doctor", "--snapshot", "{F}/snap-ok.json", "--json"),
          legit("doctor", "--snapshot", "{F}/snap-fault.json", why="exit 1: a failed check, as documented")]
    for name in ["deep.json", "empty.json", "garbage.json", "folder", "link-shadow.json", "h200x2.json"]:
        c.append(bad("doctor", "--snapshot", f"{F}/{name}"))
    c += [bad("doctor", "--snapshot", "{F}/snap-ok.json", "--save-snapshot", "{F}/folder"),
          bad("doctor", "--snapshot", "{F}/snap-ok.json", "--measure", why="measure a saved snapshot"),
          bad("doctor", "--rounds", "0", "--snapshot", "{F}/snap-ok.json"),
          bad("doctor", "--pair-bytes", "-1", "--snapshot", "{F}/snap-ok.json"),
          bad("doctor", "--pair-bytes", "lots", "--snapshot", "{F}/snap-ok.json")]

    # --- nccl-tests
    c += [legit(*NCCL), legit(*NCCL, "--json"), legit("nccl-tests", "--topology", "2x hgx-h100-8+ib-ndr"),
          legit(*NCCL, "--compare", "{F}/nccl-ok.txt")]
    for name in ["nccl-negtime.txt", "nccl-infbus.txt", "nccl-nanbus.txt", "nccl-huge.txt", "nccl-header.txt",
                 "empty.txt", "folder", "binary.bin", "link-loop-a.json"]:
        c.append(bad(*NCCL, "--compare", f"{F}/{name}"))
    c += [bad(*NCCL, "--compare", "-", why="stdin is closed: nothing to compare"),
          bad(*NCCL, "-g", "0"), bad(*NCCL, "-g", "100000000"), bad(*NCCL, "-g", "-8"),
          bad(*NCCL, "-b", "1M", "-e", "1K", why="min above max"), bad(*NCCL, "-f", "1"), bad(*NCCL, "-f", "0"),
          bad(*NCCL, "-b", "1e30"), bad(*NCCL, "-b", "-5"),
          bad(*NCCL, "--ops", "warp"), bad(*NCCL, "--op", "warp", "--compare", "{F}/nccl-ok.txt"),
          bad(*NCCL, "--op", "all_reduce", why="--op without --compare"),
          bad("nccl-tests", "--topology", "100000000x hgx-h100-8+ib-ndr"),
          bad("nccl-tests", "--topology", "no-such-topology"),
          bad(*NCCL, "--profile", "{F}/deep.json"),
          bad(*NCCL, "--nvls", "on", "--topology", "pcie-l40s-8", why="NVLS without NVSwitch")]

    # --- profile: every run needs torch; bad settings too
    PROF = ["profile", "--device", "cpu", "--steps", "1", "--warmup", "0"]
    c += [bad(*PROF, "--model", "examples.models.vit:build", why="no torch: refused"),
          bad(*PROF, "--model", "no.such.module:build"), bad(*PROF, "--model", "nocolon"),
          bad(*PROF, "--model", ""), bad(*PROF, "--model", "os:getcwd", "--micro-batch", "0"),
          bad(*PROF, "--model", "examples.models.vit:build", "--steps", "0"),
          bad(*PROF, "--model", "examples.models.vit:build", "--steps", "-1"),
          bad(*PROF, "--model", "examples.models.vit:build", "--device", "cuda", why="no GPU"),
          bad(*PROF, "--model", "examples.models.vit:build", "--out", "{F}/folder"),
          bad(*PROF, "--model", "examples.models.vit:build", "--strategies", "warp")]
    return c


# ---------------------------------------------------------------------------------------------- running

def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "NCCL_", "TOPOWISE_", "PYTHON"))}
    env.update(MPLBACKEND="Agg", CUDA_VISIBLE_DEVICES="", COLUMNS="80", XDG_CACHE_HOME=_CACHE)
    if _PYTHONPATH:
        env["PYTHONPATH"] = _PYTHONPATH
    return env


_CACHE = ""
_PYTHONPATH = ""


def verdict(case: Case, code, err: str, out: str) -> str:
    if code is None:
        return "hang"
    if "Traceback" in err or "Traceback" in out:
        return "traceback"
    lines = err.splitlines()
    if code == 2 and len(lines) == 1 and lines[0].startswith("topowise: error:"):
        return "one-line error"
    if code == 0:
        return "accepted nonsense" if case.nonsense else "ok"
    return f"other: exit {code}, {len(lines)} stderr lines"


def run_case(index: int, case: Case, topowise: str, fixtures: Path) -> dict:
    argv = [a.replace("{F}", str(fixtures)) for a in case.argv]
    with tempfile.TemporaryDirectory(prefix="case-") as cwd:
        start = time.monotonic()
        proc = subprocess.Popen([topowise, *argv], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_env(), start_new_session=True)
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group: torchrun children too
            out, err = proc.communicate()
            code = None
        seconds = time.monotonic() - start
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    err_lines = err.splitlines()
    return {"case": index, "argv": [a.replace(str(fixtures), "{F}") for a in argv], "nonsense": case.nonsense,
            "why": case.why, "exit": code, "seconds": round(seconds, 2), "stdout_lines": len(out.splitlines()),
            "stderr_lines": len(err_lines),
            "first_stderr": (err_lines[0] if err_lines else "").replace(str(fixtures), "{F}")[:400],
            "last_stderr": (err_lines[-1] if err_lines else "").replace(str(fixtures), "{F}")[:400],
            "traceback": "Traceback" in err or "Traceback" in out, "verdict": verdict(case, code, err, out)}


def main() -> int:
    global _CACHE, _PYTHONPATH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topowise", required=True, help="the CLI to run (a clone's .venv/bin/topowise)")
    parser.add_argument("--repo", required=True, type=Path, help="the clone under test (its tests/data)")
    parser.add_argument("--pythonpath", default="", help="PYTHONPATH for the CLI (when not installed)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run the cases whose argv holds this text")
    args = parser.parse_args()
    _PYTHONPATH = args.pythonpath
    all_cases = cases()
    chosen = [(i, c) for i, c in enumerate(all_cases) if args.only in " ".join(c.argv)]
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        fixtures = Path(tmp) / "fx"
        fixtures.mkdir()
        _CACHE = str(Path(tmp) / "cache")
        make_fixtures(fixtures, args.topowise, args.repo)
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            records = list(pool.map(lambda ic: run_case(ic[0], ic[1], args.topowise, fixtures), chosen))
        wall = time.monotonic() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    head = {"kind": "sweep", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}", "topowise": args.topowise, "repo": str(args.repo),
            "commit": subprocess.run(["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "cases": len(records), "jobs": args.jobs, "wall_s": round(wall, 1), "timeout_s": TIMEOUT_S}
    with args.out.open("w") as f:
        f.write(json.dumps(head) + "\n")
        for r in records:
            f.write(json.dumps(r) + "\n")
    counts = {}
    for r in records:
        key = r["verdict"] if not r["verdict"].startswith("other") else "other"
        counts[key] = counts.get(key, 0) + 1
    print(json.dumps(head))
    for k, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{n:5d}  {k}")
    for r in records:
        if r["verdict"] not in ("ok", "one-line error"):
            print(f"[{r['verdict']}] {' '.join(r['argv'])[:160]}\n      {r['first_stderr'][:160]}"
                  f"{'  ...  ' + r['last_stderr'][:160] if r['stderr_lines'] > 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
