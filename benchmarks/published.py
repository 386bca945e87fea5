"""Published training runs held against the cost model: predicted beside published with the signed error.

    python benchmarks/published.py                 # every source, then the summary
    python benchmarks/published.py --source llm_foundry_mpt --json
    python benchmarks/published.py --record        # write each row's error into its data file as "expected"
    python benchmarks/published.py --fitted        # which published rows each default-profile constant came from
    python benchmarks/published.py --markdown      # every row as a markdown table (docs/accuracy.md)

Each file of tests/data/published/ is one source: where it was read (URL, commit, table), the configuration of
every row as the run had it (model, GPUs, GPU variant with memory and power, nodes, network, strategy, micro and
global batch, sequence, precision, loss, attention, checkpointing, mesh degrees) and the published figure with
its unit. Every row is predicted through the public API (topowise.load_model, load_topology, Run, predict) with
the default profile; nothing is fitted to these rows here. The error is predicted / published - 1 of the figure
as published: tokens/s per GPU and TFLOP/s per GPU (positive: predicted faster), seconds per iteration
(positive: predicted slower).

A row is compared, or set apart with the reason, never dropped:
- a setting Run cannot take yet (fp8: "needs --precision fp8"; async TP) sets the row apart;
- a loss the run computed otherwise than the cost model charges it (llm-foundry's fused cross entropy) is
  noted; the row is set apart only where that charge makes a run that ran "not fit";
- 2021-2022 Megatron's unfused attention, where Run has no attention setting, is priced here as the HBM traffic
  of the materialized scores (`unfused_attention_bytes`, as benchmarks/published_megatron.py does);
- a configuration Run refuses is set apart with Run's message.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import topowise  # noqa: E402
from topowise import Run, UsageError, load_model, load_topology  # noqa: E402

DATA = ROOT / "tests" / "data" / "published"
RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(Run))
GIB = 2**30

# HBM bytes per attention-score element of Megatron's 2021-2022 unfused attention, fp16 (2 bytes; the dropout
# mask 1): forward 13 (QK^T writes 2, scale-mask-softmax reads 2 writes 2, dropout reads 2 writes 2 and its mask
# 1, the bmm with V reads 2), backward 17 (Megatron-LM megatron/model/transformer.py CoreAttention,
# fused_softmax.py; benchmarks/published_megatron.py)
SCORE_FORWARD_BYTES, SCORE_BACKWARD_BYTES = 13, 17
# HBM bandwidth by GPU, B/s, for the score traffic: the datasheets (topowise/hardware.py's rows)
HBM_BYTES_PER_S = {"A100": 2.039e12, "H100": 3.35e12}


@dataclass(frozen=True)
class Outcome:
    """One published row predicted: its status ("compared" or "set apart"), the figures and why."""

    source: str
    id: str
    gpu: str  # the GPU variant as the run had it (memory, power)
    gpus: int
    config: str
    unit: str
    published: float
    predicted: float | None
    error: float | None
    status: str
    reason: str  # why set apart; for a compared row, what differs from the run and how it was priced
    expected: dict | None  # what the data file records: {"status", "error"}
    # peak memory where the source publishes it (torchtitan: the maximum over GPUs), GiB; not in the error
    published_memory_gib: float | None = None
    predicted_memory_gib: float | None = None

    @property
    def compared(self) -> bool:
        return self.status == "compared"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sources() -> list[Path]:
    return sorted(DATA.glob("*.json"))


def model_of(row: dict, tmp: Path):
    """A preset by name, or the row's GPT-style shape written as a GPT-2 config.json (learned positions, tied
    embedding, biases, LayerNorm, 4h GELU MLP: MPT's and Megatron GPT's block)."""
    model = row["model"]
    if isinstance(model, str):
        return load_model(model)
    config = {"model_type": "gpt2", "n_embd": model.get("d_model", model.get("hidden")),
              "n_layer": model.get("n_layers", model.get("layers")), "n_head": model.get("n_heads", model.get("heads")),
              "vocab_size": model["vocab_size"], "n_positions": model.get("max_seq_len", model.get("seq_len"))}
    path = tmp / f"{model['name']}.json"
    path.write_text(json.dumps(config))
    return load_model(str(path))


def topology_of(row: dict, tmp: Path):
    """The row's preset or cluster; with the GPU variant (gpu_name) and power limit the run had, written as a
    topology file of the same wiring (memory 0: the catalogue's size of that variant)."""
    wiring = load_topology(row["topology"])
    if not row.get("gpu_name") and not row.get("power_limit_w"):
        return wiring
    data = wiring.to_dict()
    node = data.get("node", data)
    for gpu in node["gpus"]:
        if row.get("gpu_name"):
            gpu["name"], gpu["memory_bytes"] = row["gpu_name"], 0
    if row.get("power_limit_w"):
        node["power_limit_w"] = float(row["power_limit_w"])
    path = tmp / f"topology-{row['id']}.json"
    path.write_text(json.dumps(data))
    return load_topology(str(path))


def not_expressible(row: dict) -> list[str]:
    """The settings of the run that Run cannot take yet, each as the flag it needs."""
    needs = []
    if row.get("precision") == "fp8" and "precision" not in RUN_FIELDS:
        needs.append("needs --precision fp8")
    if row.get("async_tp") and "async_tp" not in RUN_FIELDS:
        needs.append("needs async TP")
    return needs


def run_of(row: dict, tmp: Path) -> tuple[Run, list[str]]:
    """The Run as the row ran, and the notes on what is priced otherwise than it ran."""
    notes = []
    checkpointing = row.get("checkpointing", "none")
    if checkpointing == "selective-attention":
        # Megatron's selective recompute (only the attention core) priced as topowise's selective: its memory is
        # Korthikanti's (the score terms dropped; docs/parallelism.md), its time adds the per-op recompute of
        # the out and up projections, which Megatron does not do
        checkpointing = "selective"
        notes.append("selective recompute priced with the out and up projections recomputed too")
    kwargs = {"model": model_of(row, tmp), "gpus": tuple(range(row["gpus"])), "strategy": row["strategy"],
              "micro_batch": row["micro_batch"], "seq_len": row["seq_len"], "compile": row.get("compile", False),
              "checkpointing": checkpointing, "tp": row.get("tp", 1), "pp": row.get("pp", 1), "cp": row.get("cp", 1),
              "grad_accum": row.get("grad_accum", 1)}
    for key in ("sequence_parallel", "pp_schedule", "virtual_stages", "pp_split"):
        if key in row:
            kwargs[key] = row[key]
    if row.get("pp", 1) > 1 and "pp_split" not in row and row.get("strategy") == "ddp":
        kwargs["pp_split"] = "even"  # Megatron splits layers evenly
    if row.get("precision") == "fp8" and "precision" in RUN_FIELDS:
        kwargs["precision"] = "fp8"
    if row.get("loss") in ("fused", "chunked"):
        if "loss" in RUN_FIELDS:
            kwargs["loss"] = row["loss"]
        else:
            notes.append(f"{row['loss']} loss priced as the plain one")
    if row.get("attention") == "unfused":
        if "attention" in RUN_FIELDS:
            kwargs["attention"] = "unfused"
        else:
            notes.append("unfused attention: score traffic added here")
    if row.get("precision") == "fp16":
        notes.append("fp16 priced as bf16 (same tensor-core rate)")
    return Run(**kwargs), notes


def unfused_attention_bytes(run: Run, recompute: bool) -> float:
    """HBM bytes the busiest rank's materialized attention scores move in one iteration: a / t heads x s^2 x b
    per layer and micro-batch, forward twice where the attention core is recomputed, backward once."""
    layers = max(run.layer_split.layers_on_rank(r) for r in range(run.pp))
    per_layer = run.model.num_heads / run.tp * run.seq_len**2 * run.micro_batch
    forwards = 2 if recompute else 1
    return per_layer * layers * run.grad_accum * (forwards * SCORE_FORWARD_BYTES + SCORE_BACKWARD_BYTES)


def eq3_flops(row: dict) -> float:
    """FLOPs of one iteration with activation recomputation (Narayanan et al. SC'21 eq. 3)."""
    model = row["model"]
    b, s, layers, h, v = row["global_batch"], row["seq_len"], model["layers"], model["hidden"], model["vocab_size"]
    return 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


def config_text(row: dict) -> str:
    mesh = "x".join(f"{k}{row[k]}" for k in ("tp", "pp", "cp") if row.get(k, 1) > 1)
    model = row["model"] if isinstance(row["model"], str) else row["model"]["name"]
    parts = [model, f"{row['gpus']} GPUs", row["strategy"] + (f" {mesh}" if mesh else ""),
             f"mb {row['micro_batch']}x{row.get('grad_accum', 1)}", f"seq {row['seq_len']}",
             row.get("precision", "bf16")]
    if row.get("checkpointing", "none") != "none":
        parts.append(f"ac {row['checkpointing']}")
    if row.get("compile"):
        parts.append("compile")
    return ", ".join(parts)


def predict_row(source: str, figure: str, row: dict) -> Outcome:
    """One row through the cost model; set apart, with the reason, where it cannot be expressed or does not fit."""
    base = {"source": source, "id": row["id"], "gpu": row["gpu"], "gpus": row["gpus"], "config": config_text(row),
            "unit": row["published"]["unit"], "published": float(row["published"]["value"]),
            "expected": row.get("expected"), "published_memory_gib": row.get("published_memory_gib")}
    needs = not_expressible(row)
    if needs:
        return Outcome(**base, predicted=None, error=None, status="set apart", reason="; ".join(needs))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            run, notes = run_of(row, Path(tmp))
            wiring = topology_of(row, Path(tmp))
            from topowise.costmodel.profile import default_profile

            profile = default_profile()
            if row.get("ddp") == "local":  # Megatron's 2021 DDP all-reduced after the backward: nothing hidden
                profile = dataclasses.replace(profile, overlap={**profile.overlap, "ddp": 0.0})
                notes.append("gradient all-reduce after the backward (Megatron local DDP)")
            pred = topowise.predict(run, wiring, profile)
        except UsageError as exc:
            return Outcome(**base, predicted=None, error=None, status="set apart",
                           reason=f"cannot be expressed: {exc}")
    step = pred.step_time_s
    if row.get("attention") == "unfused" and "attention" not in RUN_FIELDS:
        gpu = next(k for k in HBM_BYTES_PER_S if k in wiring.gpus[0].name)
        step += unfused_attention_bytes(run, row.get("checkpointing") != "none") / (
            HBM_BYTES_PER_S[gpu] * profile.hbm_efficiency)
    if figure == "tokens_per_s_per_gpu":
        predicted = pred.tokens_per_s_per_gpu * pred.step_time_s / step
    elif figure == "tflops_per_gpu_eq3":
        predicted = eq3_flops(row) / step / row["gpus"] / 1e12
    elif figure == "iteration_time_s":
        predicted = step
    else:
        raise ValueError(f"unknown figure {figure!r}")
    error = predicted / base["published"] - 1
    base["predicted_memory_gib"] = pred.peak_memory_bytes / GIB
    if not pred.fits:
        peak = pred.peak_memory_bytes / GIB
        why = f"predicted not to fit ({peak:.1f} GiB peak) though it ran"
        if any("loss priced" in n for n in notes):
            why += (f"; the cost model charges the plain loss, the run used the {row['loss']} one: "
                    f"needs --loss {row['loss']}")
        return Outcome(**base, predicted=predicted, error=error, status="set apart", reason=why)
    return Outcome(**base, predicted=predicted, error=error, status="compared", reason="; ".join(notes))


def predict_source(path: Path) -> list[Outcome]:
    data = json.loads(path.read_text())
    return [predict_row(path.stem, data["figure"], row) for row in data["rows"]]


def predict_all() -> list[Outcome]:
    return [o for path in sources() for o in predict_source(path)]


def summary(outcomes: list[Outcome]) -> dict:
    """Mean and worst |error| over the compared rows, with the worst row; counts of compared and set apart."""
    compared = [o for o in outcomes if o.compared]
    out = {"compared": len(compared), "set_apart": len(outcomes) - len(compared)}
    if compared:
        worst = max(compared, key=lambda o: abs(o.error or 0.0))
        out.update(mean_abs_error=statistics.mean(abs(o.error or 0.0) for o in compared),
                   worst_abs_error=abs(worst.error or 0.0), worst=f"{worst.source}/{worst.id}")
    return out


def fitted_constants() -> dict[str, list[str]]:
    """Each default-profile constant whose recorded source names a published source, with the names it cites.
    A constant not listed was fitted to no published row: every published training row validates it."""
    from topowise.costmodel.profile import default_profile

    cited = {"nccl-tests issue": "published nccl-tests outputs (NVIDIA/nccl-tests issues)",
             "llm-foundry": "llm-foundry", "torchtitan": "torchtitan", "Narayanan": "Megatron-LM SC'21",
             "Korthikanti": "Korthikanti et al. 2022"}
    found: dict[str, list[str]] = {}
    for name, text in default_profile().sources.items():
        hits = [what for phrase, what in cited.items() if phrase.lower() in text.lower()]
        if hits:
            found[name] = hits
    return found


def record(outcomes: list[Outcome]) -> None:
    """Write each row's status and error into its data file as "expected" (the regression check's reference)."""
    by_source: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        by_source.setdefault(o.source, {})[o.id] = o
    for path in sources():
        data = json.loads(path.read_text())
        for row in data["rows"]:
            o = by_source[path.stem][row["id"]]
            row["expected"] = {"status": o.status, "error": None if o.error is None else round(o.error, 4)}
        path.write_text(json.dumps(data, indent=1) + "\n")


def render(outcomes: list[Outcome]) -> str:
    lines = []
    for source in dict.fromkeys(o.source for o in outcomes):
        rows = [o for o in outcomes if o.source == source]
        title = json.loads((DATA / f"{source}.json").read_text())["source"]["short"]
        lines += ["", f"{source}: {title}",
                  f"  {'row':<44} {'published':>10} {'predicted':>10} {'error':>7}  {'unit':<24} note"]
        for o in rows:
            pred = f"{o.predicted:>10.4g}" if o.predicted is not None else f"{'-':>10}"
            err = f"{o.error:>+7.1%}" if o.error is not None else f"{'-':>7}"
            note = o.reason if o.compared else f"SET APART: {o.reason}"
            if o.published_memory_gib and o.predicted_memory_gib:
                note = (f"memory {o.predicted_memory_gib:.1f} GiB predicted, {o.published_memory_gib} published"
                        + (f"; {note}" if note else ""))
            lines.append(f"  {o.id:<44} {o.published:>10.4g} {pred} {err}  {o.unit:<24} {note}")
        s = summary(rows)
        lines.append(f"  {source}: {s['compared']} compared, {s['set_apart']} set apart"
                     + (f"; mean |error| {s['mean_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} ({s['worst']})"
                        if s["compared"] else ""))
    s = summary(outcomes)
    lines += ["", f"overall: {s['compared']} compared, {s['set_apart']} set apart; mean |error| "
              f"{s['mean_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} ({s['worst']}); no row was fitted to "
              "(`--fitted`: the constants fitted to published nccl-tests figures, none to a training row)"]
    return "\n".join(lines[1:])


def markdown(outcomes: list[Outcome]) -> str:
    """Every row as a markdown table: source, row, configuration, published, predicted, error or why set apart."""
    lines = ["| source | row | configuration | published | predicted | error |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        pred = f"{o.predicted:.4g}" if o.predicted is not None else "-"
        err = f"{o.error:+.1%}" if o.compared else f"set apart: {o.reason}"
        lines.append(f"| {o.source} | {o.id} | {o.config} | {o.published:.4g} {o.unit} | {pred} | {err} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="one data file's stem (default: every file in tests/data/published/)")
    parser.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    parser.add_argument("--record", action="store_true", help="write each row's status and error as expected")
    parser.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    parser.add_argument("--fitted", action="store_true", help="print the default-profile constants fitted to "
                        "published figures and what they cite")
    args = parser.parse_args(argv)
    if args.fitted:
        for name, what in fitted_constants().items():
            print(f"{name}: {', '.join(what)}")
        return 0
    if args.source:
        path = DATA / f"{args.source}.json"
        if not path.is_file():
            names = ", ".join(p.stem for p in sources())
            print(f"published.py: error: no source {args.source!r}; valid: {names}", file=sys.stderr)
            return 2
        outcomes = predict_source(path)
    else:
        outcomes = predict_all()
    if args.record:
        record(outcomes)
    if args.markdown:
        print(markdown(outcomes))
    elif args.json:
        print(json.dumps({"rows": [o.to_dict() for o in outcomes], "summary": summary(outcomes)}, indent=1))
    else:
        print(render(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
