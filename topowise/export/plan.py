"""`LaunchPlan`: the chosen plan reduced to plain values, what `plan --save-plan` writes and
`launch --plan` reads (format "topowise.plan", version 1), and what every exporter renders."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from topowise.errors import UsageError
from topowise.export.multinode import nccl_network_env
from topowise.run import ENGINES, FABRICS, STRATEGIES, Strategy, check_shard_group_size, normalize_strategy

FORMAT = "topowise.plan"
VERSION = 1


@dataclass(frozen=True)
class LaunchPlan:
    model: str
    topology: str
    strategy: str
    gpus: tuple[int, ...]
    micro_batch: int
    seq_len: int
    activation_checkpointing: bool
    shard_group_size: int | None = None
    checkpointing: str = ""  # none | selective | full (run.CHECKPOINTING); "" = from activation_checkpointing
    selective_ac_option: str = "op"  # with selective: "op" (per op) or k (every k-th block)
    fabric: str = "nvlink"
    compile: bool = False  # torch.compile of each block
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
    engine: str = "pytorch"  # whose ZeRO the prediction is: pytorch (FSDP2) or deepspeed (plan --engine)
    nccl_algo: str = ""  # across nodes: "ring"/"tree" when the model expects it to beat NCCL's choice (nccl_advice)
    nccl_reason: str = ""  # why NCCL_ALGO is set, or why NCCL is left alone (a comment in the exports)

    def __post_init__(self) -> None:
        if not self.checkpointing:  # plans written before the modes: the flag alone
            object.__setattr__(self, "checkpointing", "full" if self.activation_checkpointing else "none")

    @property
    def spec(self) -> Strategy:
        return STRATEGIES[self.strategy]

    @property
    def nproc(self) -> int:
        return len(self.gpus)

    @property
    def nproc_per_node(self) -> int:
        return self.nproc // self.num_nodes

    @property
    def local_gpus(self) -> tuple[int, ...]:
        """The GPUs each node runs on, in node-local indices (global index modulo the node's GPUs)."""
        if self.num_nodes == 1 or not self.node_gpus:
            return self.gpus
        return tuple(sorted({g % self.node_gpus for g in self.gpus}))

    @property
    def shard_groups(self) -> tuple[tuple[int, ...], ...]:
        """HSDP shard groups: consecutive runs of the plan's GPUs (island-mates are adjacent)."""
        if not self.spec.replicated or not self.shard_group_size:
            return ()
        size = self.shard_group_size
        return tuple(self.gpus[i:i + size] for i in range(0, len(self.gpus), size))

    @property
    def env(self) -> dict[str, str]:
        """What the ranks need set. NVLink needs no NCCL variable; only the PCIe what-if turns P2P off."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.local_gpus)}
        if self.fabric == "pcie":
            env["NCCL_P2P_DISABLE"] = "1"  # the --fabric pcie what-if: NCCL keeps off NVLink
        if self.num_nodes > 1:
            env.update(nccl_network_env(self.network, self.nic_names))
        if self.nccl_algo:
            env["NCCL_ALGO"] = f"allreduce:{self.nccl_algo}"  # NCCL's per-collective form (nccl_advice.py)
        return env

    @property
    def nccl_notes(self) -> list[str]:
        """Comment lines: why NCCL_ALGO is set, or why NCCL is left alone (plans across nodes)."""
        return [self.nccl_reason] if self.nccl_reason else []

    @property
    def warnings(self) -> tuple[str, ...]:
        out = []
        if self.islands_spanned > self.num_nodes:  # more than one island on a node
            rate = f" at {self.link_gbps:.0f} GB/s" if self.link_gbps else ""
            out.append(f"the plan spans {self.islands_spanned} NVLink islands: collectives over all "
                       f"{self.nproc} GPUs cross PCIe{rate}")
        if self.fabric == "pcie":
            out.append("NCCL_P2P_DISABLE=1 keeps NCCL off NVLink (the PCIe what-if); drop it for real runs")
        if self.compile:  # no launcher flag compiles each block alone: the training script (or torchtitan) does
            out.append("the plan's speed assumes each transformer block compiled (torch.compile per block, as "
                       "torchtitan's compile.enable with components model does); without it expect the eager step")
        return tuple(out)

    def summary(self) -> str:
        groups = ""
        if self.shard_groups:
            groups = " (shard groups " + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.shard_groups) + ")"
        ac = ""
        if self.activation_checkpointing:
            mode = self.checkpointing
            option = f" ({self.selective_ac_option})" if mode == "selective" else ""
            ac = f", {mode}{option} activation checkpointing"
        ac += ", compiled" if self.compile else ""
        engine = f" as DeepSpeed runs it (ZeRO-{self.spec.deepspeed_stage})" if self.engine == "deepspeed" else ""
        where = f"{self.num_nodes} nodes x GPUs {','.join(map(str, self.local_gpus))}" if self.num_nodes > 1 else \
            f"GPUs {','.join(map(str, self.gpus))}"
        return (f"{self.strategy}{engine}{groups} on {where}, micro-batch {self.micro_batch}, "
                f"seq {self.seq_len}{ac}: {self.model} on {self.topology}, "
                f"predicted {self.tokens_per_s:,.0f} tokens/s")

    @classmethod
    def from_plan(cls, plan, result, topo) -> LaunchPlan:
        """From a ranked `planner.search.Plan` and its `PlanResult` (model, seq_len, fabric) on `topo`."""
        pred = plan.prediction
        link = pred.bottleneck_gbps
        per_node = topo.gpus_per_node
        counts = {}
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
            model=result.model, topology=topo.name, strategy=plan.strategy, gpus=tuple(plan.gpus),
            micro_batch=plan.micro_batch, seq_len=result.seq_len,
            activation_checkpointing=plan.activation_checkpointing, shard_group_size=plan.shard_group_size,
            checkpointing=pred.run.checkpointing, selective_ac_option=str(pred.run.selective_ac_option),
            compile=pred.run.compile,
            fabric=result.fabric, step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s,
            peak_memory_bytes=pred.memory.peak_bytes, gpu_memory_bytes=pred.memory.gpu_memory_bytes,
            link_gbps=None if link is None or link == float("inf") else link,
            islands_spanned=pred.islands_spanned, node_gpus=per_node, why=plan.why, num_nodes=len(counts),
            network=network.kind if network else "",
            nic_names=tuple(n.name for n in topo.node.nics) if network else (),
            engine=pred.engine,
            nccl_algo=advice.algorithm if advice else "", nccl_reason=advice.reason if advice else "",
        )

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model,
            "topology": self.topology,
            "plan": {
                "strategy": self.strategy,
                "gpus": list(self.gpus),
                "micro_batch": self.micro_batch,
                "seq_len": self.seq_len,
                "activation_checkpointing": self.activation_checkpointing,
                "checkpointing": self.checkpointing,
                "selective_ac_option": self.selective_ac_option,
                "compile": self.compile,
                "shard_group_size": self.shard_group_size,
                "fabric": self.fabric,
                "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s,
                "peak_memory_bytes": self.peak_memory_bytes,
                "gpu_memory_bytes": self.gpu_memory_bytes,
                "link_gbps": self.link_gbps,
                "islands_spanned": self.islands_spanned,
                "why": self.why,
                "engine": self.engine,
            },
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
            gpus = tuple(int(g) for g in p["gpus"])
            plan = cls(
                model=str(data["model"]), topology=str(data["topology"]), strategy=str(p["strategy"]),
                gpus=gpus, micro_batch=int(p["micro_batch"]), seq_len=int(p["seq_len"]),
                activation_checkpointing=bool(p["activation_checkpointing"]),
                checkpointing=str(p.get("checkpointing", "")),
                selective_ac_option=str(p.get("selective_ac_option", "op")),
                compile=bool(p.get("compile", False)),
                shard_group_size=None if p.get("shard_group_size") is None else int(p["shard_group_size"]),
                fabric=str(p.get("fabric", "nvlink")), step_time_s=float(p.get("step_time_s", 0.0)),
                tokens_per_s=float(p.get("tokens_per_s", 0.0)),
                peak_memory_bytes=int(p.get("peak_memory_bytes", 0)),
                gpu_memory_bytes=int(p.get("gpu_memory_bytes", 0)),
                link_gbps=None if p.get("link_gbps") is None else float(p["link_gbps"]),
                islands_spanned=int(p.get("islands_spanned", 1)), node_gpus=int(data.get("node_gpus", 0)),
                why=str(p.get("why", "")), num_nodes=int(data.get("num_nodes", 1)),
                network=str(data.get("network", "")), nic_names=tuple(str(n) for n in data.get("nic_names", ())),
                engine=str(p.get("engine", "pytorch")),
                nccl_algo=str((data.get("nccl") or {}).get("algo", "")),
                nccl_reason=str((data.get("nccl") or {}).get("reason", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: plan JSON is missing or has a bad field ({exc})") from None
        if not gpus or plan.micro_batch < 1 or plan.seq_len < 1 or len(set(gpus)) != len(gpus):
            raise UsageError(f"{where}: plan needs distinct GPUs and a positive micro-batch and sequence length")
        if plan.fabric not in FABRICS:
            raise UsageError(f"{where}: fabric {plan.fabric!r} is neither nvlink nor pcie")
        if plan.engine not in ENGINES:
            raise UsageError(f"{where}: engine {plan.engine!r} is not one of {', '.join(ENGINES)}")
        if plan.nccl_algo not in ("", "ring", "tree"):
            raise UsageError(f"{where}: nccl.algo {plan.nccl_algo!r} is not ring, tree or empty")
        try:
            plan = replace(plan, strategy=normalize_strategy(plan.strategy))
            if plan.engine == "deepspeed" and plan.spec.deepspeed_stage is None:
                raise UsageError(f"{plan.strategy} is not predicted as DeepSpeed runs it (engine deepspeed)")
            if plan.spec.replicated and plan.shard_group_size is not None:
                check_shard_group_size(plan.shard_group_size, plan.nproc)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        return plan

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


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
    return LaunchPlan.from_dict(data, path)
