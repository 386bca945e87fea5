"""`LaunchPlan`: the chosen plan's Run and what was predicted of it, what `plan --save-plan` writes and
`launch --plan` reads (format "topowise.plan", version 1), and what every exporter renders.

The file's "plan" object is the run's `Run.to_dict()` (the model apart: its name in "model", its shape in
"model_spec") with the prediction's numbers beside it, and is read back through `Run.from_dict()`. Files
written before "model_spec" name a preset or a config.json, which is loaded again."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from topowise.errors import UsageError
from topowise.export.multinode import nccl_network_env
from topowise.models.spec import load_model
from topowise.run import ALIASES, CHECKPOINTING, STRATEGIES, Run, Strategy

if TYPE_CHECKING:
    from topowise.planner.search import Plan, PlanResult
    from topowise.topology.model import Wiring

FORMAT = "topowise.plan"
VERSION = 1
# What the torchrun and Slurm exports and `launch` set for the training script (read_plan reads them back)
STRATEGY_VAR, MICRO_BATCH_VAR, CHECKPOINTING_VAR, PLAN_VAR = (
    "TOPOWISE_STRATEGY", "TOPOWISE_MICRO_BATCH", "TOPOWISE_CHECKPOINTING", "TOPOWISE_PLAN")


@dataclass(frozen=True)
class LaunchPlan:
    run: Run
    topology: str
    step_time_s: float = 0.0
    tokens_per_s: float = 0.0
    peak_memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    link_gbps: float | None = None  # line rate of the slowest link the plan's collectives cross
    islands_spanned: int = 1
    node_gpus: int = 0  # GPUs in the whole node (Slurm asks for all of them to pin a subset)
    why: str = ""
    num_nodes: int = 1  # a plan on a Cluster: nodes spanned, the same GPUs on each (export/multinode.py)
    network: str = ""  # the cluster's network kind (ib-ndr, roce-200, eth-100, ...)
    nic_names: tuple[str, ...] = ()  # the node's NICs, for NCCL_IB_HCA where they are RDMA devices
    nccl_algo: str = ""  # across nodes: "ring"/"tree" when the model expects it to beat NCCL's choice (nccl_advice)
    nccl_reason: str = ""  # why NCCL_ALGO is set, or why NCCL is left alone (a comment in the exports)
    plan_path: str = ""  # where this plan was saved (plan --save-plan, launch --plan): TOPOWISE_PLAN; not in the JSON

    def __post_init__(self) -> None:
        if self.nccl_algo not in ("", "ring", "tree"):
            raise UsageError(f"nccl.algo {self.nccl_algo!r} is not ring, tree or empty")

    @property
    def spec(self) -> Strategy:
        return self.run.spec

    @property
    def nproc(self) -> int:
        return self.run.num_gpus

    @property
    def nproc_per_node(self) -> int:
        return self.nproc // self.num_nodes

    @property
    def local_gpus(self) -> tuple[int, ...]:
        """The GPUs each node runs on, in node-local indices (global index modulo the node's GPUs)."""
        if self.num_nodes == 1 or not self.node_gpus:
            return self.run.gpus
        return tuple(sorted({g % self.node_gpus for g in self.run.gpus}))

    @property
    def shard_groups(self) -> tuple[tuple[int, ...], ...]:
        """HSDP shard groups: consecutive runs of the plan's GPUs (island-mates are adjacent)."""
        gpus, size = self.run.gpus, self.run.shard_group_size
        if not self.spec.replicated or not size:
            return ()
        return tuple(gpus[i:i + size] for i in range(0, len(gpus), size))

    @property
    def env(self) -> dict[str, str]:
        """What the ranks need set. NVLink needs no NCCL variable; only the PCIe what-if turns P2P off."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.local_gpus)}
        if self.run.fabric == "pcie":
            env["NCCL_P2P_DISABLE"] = "1"  # the --fabric pcie what-if: NCCL keeps off NVLink
        if self.num_nodes > 1:
            env.update(nccl_network_env(self.network, self.nic_names))
        if self.nccl_algo:
            env["NCCL_ALGO"] = f"allreduce:{self.nccl_algo}"  # NCCL's per-collective form (nccl_advice.py)
        return env

    @property
    def settings_env(self) -> dict[str, str]:
        """What the user's script reads back with `topowise.export.read_plan()`: the chosen strategy, micro-batch
        and checkpointing, and the plan file (everything else) where it was saved."""
        run = self.run
        env = {STRATEGY_VAR: run.strategy, MICRO_BATCH_VAR: str(run.micro_batch), CHECKPOINTING_VAR: run.checkpointing}
        if self.plan_path:
            env[PLAN_VAR] = self.plan_path
        return env

    @property
    def nccl_notes(self) -> list[str]:
        """Comment lines: why NCCL_ALGO is set, or why NCCL is left alone (plans across nodes)."""
        return [self.nccl_reason] if self.nccl_reason else []

    @property
    def warnings(self) -> tuple[str, ...]:
        out = []
        if self.islands_spanned > self.num_nodes and self.run.has_mesh:
            out.append(f"the plan spans {self.islands_spanned} NVLink islands: its tp groups stay inside them, the "
                       "pipeline and data-parallel traffic crosses PCIe")
        elif self.islands_spanned > self.num_nodes:  # more than one island on a node
            rate = f" at {self.link_gbps:.0f} GB/s" if self.link_gbps else ""
            out.append(f"the plan spans {self.islands_spanned} NVLink islands: collectives over all "
                       f"{self.nproc} GPUs cross PCIe{rate}")
        if self.run.fabric == "pcie":
            out.append("NCCL_P2P_DISABLE=1 keeps NCCL off NVLink (the PCIe what-if); drop it for real runs")
        if self.run.compile:  # no launcher flag compiles each block alone: the training script (or torchtitan) does
            out.append("the plan's speed assumes each transformer block compiled (torch.compile per block, as "
                       "torchtitan's compile.enable with components model does); without it expect the eager step")
        return tuple(out)

    def summary(self) -> str:
        run = self.run
        groups = ""
        if self.shard_groups:
            groups = " (shard groups " + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.shard_groups) + ")"
        ac = ""
        if run.activation_checkpointing:
            option = f" ({run.selective_ac_option})" if run.checkpointing == "selective" else ""
            ac = f", {run.checkpointing}{option} activation checkpointing"
        ac += ", compiled" if run.compile else ""
        engine = f" as DeepSpeed runs it (ZeRO-{self.spec.deepspeed_stage})" if run.engine == "deepspeed" else ""
        where = f"{self.num_nodes} nodes x GPUs {','.join(map(str, self.local_gpus))}" if self.num_nodes > 1 else \
            f"GPUs {','.join(map(str, run.gpus))}"
        return (f"{run.strategy}{engine}{groups} on {where}, micro-batch {run.micro_batch}, "
                f"seq {run.seq_len}{ac}: {run.model.name} on {self.topology}, "
                f"predicted {self.tokens_per_s:,.0f} tokens/s")

    @classmethod
    def from_plan(cls, plan: Plan, result: PlanResult, topo: Wiring) -> LaunchPlan:
        """From a ranked `planner.search.Plan` and its `PlanResult` (the profile it was predicted with) on `topo`."""
        pred = plan.prediction
        link = pred.bottleneck_gbps
        per_node = topo.gpus_per_node
        counts: dict[int, int] = {}
        for g in plan.gpus:
            counts[g // per_node] = counts.get(g // per_node, 0) + 1
        if len(set(counts.values())) > 1:
            raise UsageError(f"the plan puts {sorted(counts.values())} GPUs on its nodes; torchrun and Slurm start the "
                             "same number on every node (plan with --num-gpus a multiple of the nodes used)")
        network = topo.network  # None on a single node
        advice = None
        if len(counts) > 1:
            from topowise.nccl_advice import advise

            advice = advise(pred, topo, result.profile)
        return cls(
            run=pred.run, topology=topo.name, step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s,
            peak_memory_bytes=pred.memory.peak_bytes, gpu_memory_bytes=pred.memory.gpu_memory_bytes,
            link_gbps=None if link is None or link == float("inf") else link,
            islands_spanned=pred.islands_spanned, node_gpus=per_node, why=plan.why, num_nodes=len(counts),
            network=network.kind if network else "",
            nic_names=tuple(n.name for n in topo.node.nics) if network else (),
            nccl_algo=advice.algorithm if advice else "", nccl_reason=advice.reason if advice else "",
        )

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        settings = self.run.to_dict()
        model = settings.pop("model")
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.run.model.name,
            "topology": self.topology,
            "plan": {
                **settings,
                "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s,
                "peak_memory_bytes": self.peak_memory_bytes,
                "gpu_memory_bytes": self.gpu_memory_bytes,
                "link_gbps": self.link_gbps,
                "islands_spanned": self.islands_spanned,
                "why": self.why,
            },
            "model_spec": model,
            "node_gpus": self.node_gpus,
            "num_nodes": self.num_nodes,
            "network": self.network,
            "nic_names": list(self.nic_names),
            "nccl": {"algo": self.nccl_algo, "reason": self.nccl_reason},
            "nproc": self.nproc,
            "env": self.env,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "plan JSON") -> LaunchPlan:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{where} is not a topowise plan (no \"format\": \"{FORMAT}\"); "
                             "write one with `topowise plan ... --save-plan FILE`")
        if data.get("version") != VERSION:
            raise UsageError(f"{where} is plan format version {data.get('version')}; this topowise reads {VERSION}")
        try:
            p = data["plan"]
            nccl = data.get("nccl") or {}
            plan = cls(
                run=Run.from_dict(dict(p, model=_model_spec(data, where))), topology=str(data["topology"]),
                step_time_s=float(p.get("step_time_s", 0.0)), tokens_per_s=float(p.get("tokens_per_s", 0.0)),
                peak_memory_bytes=int(p.get("peak_memory_bytes", 0)),
                gpu_memory_bytes=int(p.get("gpu_memory_bytes", 0)),
                link_gbps=None if p.get("link_gbps") is None else float(p["link_gbps"]),
                islands_spanned=int(p.get("islands_spanned", 1)), node_gpus=int(data.get("node_gpus", 0)),
                why=str(p.get("why", "")), num_nodes=int(data.get("num_nodes", 1)),
                network=str(data.get("network", "")), nic_names=tuple(str(n) for n in data.get("nic_names", ())),
                nccl_algo=str(nccl.get("algo", "")), nccl_reason=str(nccl.get("reason", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: plan JSON is missing or has a bad field ({exc})") from None
        except UsageError as exc:  # what Run (or the NCCL choice) refuses
            raise UsageError(f"{where}: {exc}") from None
        plan.check_gpus_on_node(where)
        return plan

    def check_gpus_on_node(self, where: str) -> None:
        """A single-node plan's GPUs exist on its node (CUDA_VISIBLE_DEVICES=0,99 would start no rank 1)."""
        if self.num_nodes == 1 and self.node_gpus and max(self.run.gpus) >= self.node_gpus:
            raise UsageError(f"{where}: GPU {max(self.run.gpus)} is not on the plan's node of {self.node_gpus} GPUs "
                             f"(0-{self.node_gpus - 1})")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def with_path(self, path: str) -> LaunchPlan:
        """This plan, saved at `path` (absolute: the ranks may start in another folder)."""
        return replace(self, plan_path=os.path.abspath(path))


def _model_spec(data: dict, where: str) -> dict:
    """The model's shape: "model_spec", or for a plan written before it, the preset or config.json it names."""
    if "model_spec" in data:
        return data["model_spec"]
    name = str(data["model"])
    try:
        return load_model(name).to_dict()
    except UsageError as exc:
        raise UsageError(f"names model {name!r} and has no \"model_spec\" (written by an older topowise), and "
                         f"{name!r} does not load here ({exc}): save the plan again") from None


def load_plan_file(path: str) -> LaunchPlan:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the plan ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a topowise plan: not text (a plan is the JSON `topowise plan "
                         "--save-plan FILE` writes)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not a topowise plan: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:  # the parser recurses per level
        raise UsageError(f"{path} is not a topowise plan: JSON nested too deeply") from None
    return LaunchPlan.from_dict(data, path)


@dataclass(frozen=True)
class PlanSettings:
    """What a training script started by `topowise launch` or a torchrun/Slurm export was planned to run."""

    strategy: str  # ddp | zero1 | zero2 | zero3 | hsdp
    micro_batch: int
    checkpointing: str  # none | selective | full (torchtitan's activation_checkpoint.mode)
    plan: LaunchPlan | None = None  # the whole plan (gpus, mesh, prediction) when TOPOWISE_PLAN names its file


def read_plan(environ: Mapping[str, str] | None = None) -> PlanSettings | None:
    """The plan this process was launched with, from TOPOWISE_STRATEGY, TOPOWISE_MICRO_BATCH,
    TOPOWISE_CHECKPOINTING and TOPOWISE_PLAN (a variable set wins over the plan file, so one can be changed
    by hand); None when none of them is set (the script was started some other way)."""
    env = os.environ if environ is None else environ
    plan = load_plan_file(env[PLAN_VAR]) if env.get(PLAN_VAR) else None
    given = {k: env[k].strip() for k in (STRATEGY_VAR, MICRO_BATCH_VAR, CHECKPOINTING_VAR) if env.get(k, "").strip()}
    if plan is None and not given:
        return None
    if plan is None and len(given) < 3:
        missing = [k for k in (STRATEGY_VAR, MICRO_BATCH_VAR, CHECKPOINTING_VAR) if k not in given]
        raise UsageError(f"{', '.join(given)} set without {', '.join(missing)}: set all three, or {PLAN_VAR}=plan.json")
    strategy = given.get(STRATEGY_VAR, plan.run.strategy if plan else "").lower()
    strategy = ALIASES.get(strategy, strategy)
    if strategy not in STRATEGIES:
        raise UsageError(f"{STRATEGY_VAR}={strategy!r} is not a strategy; valid: {', '.join(STRATEGIES)}")
    text = given.get(MICRO_BATCH_VAR, str(plan.run.micro_batch) if plan else "")
    if not (text.isascii() and text.isdigit()) or int(text) < 1:  # "²" is a digit to isdigit, not to int
        raise UsageError(f"{MICRO_BATCH_VAR}={text!r} is not a positive whole number")
    checkpointing = given.get(CHECKPOINTING_VAR, plan.run.checkpointing if plan else "").lower()
    if checkpointing not in CHECKPOINTING:
        raise UsageError(f"{CHECKPOINTING_VAR}={checkpointing!r}; valid: {', '.join(CHECKPOINTING)}")
    return PlanSettings(strategy=strategy, micro_batch=int(text), checkpointing=checkpointing, plan=plan)
