"""Four network questions, answered for two model sizes with numbers the cost model computes.

1. Is InfiniBand worth its price over RoCE or Ethernet for this job?  The best plan on each network
   for the same cluster shape, tokens/s and the cost per million tokens (topowise.prices).
2. Can ZeRO-2 still train a small model over Gigabit Ethernet, and at what size does it stop being
   practical?  zero2 on two nodes joined by 1 GbE, model sizes from 124M up; "practical" is defined
   here as the GPUs waiting on the network for less than half of the step (PRACTICAL_WAIT).
3. What do tens of metres between racks add?  The same job with its nodes in racks 0-100 m apart.
4. What does training across regions cost once the traffic is encrypted?  Two regions joined by a
   WAN, with no encryption and with each cipher, best plan and the WAN's share.

Every sentence is made from the rows it stands over; a question the cost model of this build cannot
answer (a network or a cluster attribute it does not have) says so instead of a number.
"""

from __future__ import annotations

from topowise.errors import UsageError
from topowise.prices import Prices
from topowise.report.answer import Answer
from topowise.report.networks_geo import across_regions, racks_apart  # questions 3 and 4
from topowise.report.whatif import HEADERS as WHATIF_HEADERS
from topowise.report.whatif import SOCKET_CAP_NOTE, with_socket_cap
from topowise.report.whatif import rows as whatif_rows

PRACTICAL_WAIT = 0.5  # question 2: practical while the GPUs wait on the network under half the step
Q1_NODE, Q1_NODES = "hgx-h100-8", 4
Q1_NETWORKS = ("ib-ndr", "roce-400", "eth-400", "eth-100", "eth-25")
Q2_NODE, Q2_NODES, Q2_NETWORK, Q2_REFERENCE = "pcie-l40s-8", 2, "eth-1", "eth-100"
Q2_MODELS = ("gpt2", "qwen2.5-0.5b", "llama3.2-1b", "llama3.2-3b", "llama3.1-8b")
MICRO_BATCHES = (8, 4, 2, 1)  # question 2: the largest that fits


def known(networks) -> tuple[str, ...]:
    from topowise.whatif import known_networks

    have = set(known_networks())
    return tuple(n for n in networks if n.split("x")[0] in have or n in have)


def _cluster(node: str, nodes: int, network: str):
    from topowise.topology.cluster import load_cluster

    return load_cluster(f"{nodes}x {node}+{network}")


def _usd(x) -> str:
    return "-" if x is None else f"{x:,.3f}"


# --- 1: InfiniBand against RoCE and Ethernet -------------------------------------------------------

def infiniband_worth_it(models, *, seq_len: int, micro_batch: int, profile=None,
                        prices: Prices | None = None) -> Answer:
    from topowise.whatif import compare_plans

    nets = known(Q1_NETWORKS)
    cluster = _cluster(Q1_NODE, Q1_NODES, nets[0])
    sentences, tables, values = [], [], {}
    for model in models:
        rows = compare_plans(model, cluster, nets, prices=prices, num_gpus=cluster.num_gpus,
                             micro_batches=(micro_batch,), seq_len=seq_len, profile=profile)
        values[model.name] = [r.to_dict() for r in rows]
        tables.append((f"{model.name} on {Q1_NODES}x {Q1_NODE}, every GPU, micro-batch {micro_batch} x {seq_len}",
                       WHATIF_HEADERS, whatif_rows(rows)))
        sentences.append(_q1_sentence(model.name, rows))
    return Answer("infiniband", "Is InfiniBand worth its price over RoCE or Ethernet for this job?",
                  tuple(sentences), tuple(tables),
                  (f"{Q1_NODES} nodes of {Q1_NODE} (8 GPUs each); each network with its own NIC count "
                   "(InfiniBand and RoCE one per GPU, Ethernet one per node); prices: topowise/prices.py "
                   "defaults (docs/sources.md)",
                   "InfiniBand NDR and RoCE 400 use the same NIC (ConnectX-7) and, in this model, the same per-NIC "
                   "rate and RDMA latency; what separates them on a real fabric under load (congestion control, "
                   "adaptive routing, in-network reduction) is not modelled, so a tie here means the model cannot "
                   "tell them apart"), values)


def _per_million(r):
    return r.cost.usd_per_million_tokens if r.cost and r.strategy else None


def _q1_sentence(name: str, rows) -> str:
    ib = next((r for r in rows if r.network.startswith("ib-")), None)
    others = [r for r in rows if not r.network.startswith("ib-") and _per_million(r) is not None]
    if ib is None or _per_million(ib) is None or not others:
        return f"{name}: no priced InfiniBand row and alternative to compare."
    cheapest = min(others, key=_per_million)
    fastest = max(others, key=lambda r: r.tokens_per_s)
    a, b = _per_million(ib), _per_million(cheapest)
    if b < 0.99 * a:
        verdict = f"no: {cheapest.network} trains a token {1 - b / a:.0%} cheaper"
    elif a < 0.99 * b:
        verdict = f"yes: it trains a token {1 - a / b:.0%} cheaper than the cheapest alternative, {cheapest.network}"
    else:
        verdict = f"it ties with {cheapest.network} per token (within 1%)"
    eth = [r for r in others if r.network.startswith("eth-")]
    if eth and not cheapest.network.startswith("eth-"):
        e = min(eth, key=_per_million)
        verdict += (f"; against Ethernet without RDMA (best: {e.network}, {_per_million(e):.3f} USD per 1M tokens) "
                    f"InfiniBand trains a token {_per_million(e) / a:.1f}x cheaper")
    return (f"{name}: {verdict}. InfiniBand NDR: {ib.tokens_per_s:,.0f} tokens/s, {ib.network_wait_fraction:.0%} of "
            f"the step waiting on the network, {a:.3f} USD per 1M tokens; {cheapest.network}: "
            f"{cheapest.tokens_per_s:,.0f} tokens/s, {cheapest.network_wait_fraction:.0%} waiting, {b:.3f} USD"
            + ("" if fastest is cheapest else
               f"; the fastest alternative, {fastest.network}, reaches {fastest.tokens_per_s / ib.tokens_per_s:.0%} "
               "of InfiniBand's tokens/s") + ".")


# --- 2: ZeRO-2 over Gigabit Ethernet ---------------------------------------------------------------

def zero2_over_gigabit(models=None, *, seq_len: int, profile=None) -> Answer:
    from topowise.costmodel.predict import predict
    from topowise.models.spec import load_model
    from topowise.run import Run
    from topowise.whatif import network_wait_s

    title = "Can ZeRO-2 still train a small model over Gigabit Ethernet, and at what size does it stop?"
    if not known((Q2_NETWORK,)):
        return Answer("gigabit", title, (f"not answered: this build has no {Q2_NETWORK} network.",))
    specs = list(models or [load_model(m) for m in Q2_MODELS])
    specs.sort(key=lambda m: m.params)
    slow, fast = _cluster(Q2_NODE, Q2_NODES, Q2_NETWORK), _cluster(Q2_NODE, Q2_NODES, Q2_REFERENCE)
    gpus = tuple(range(slow.num_gpus))
    rows, values, first_impractical = [], [], None
    for model in specs:
        found = None
        seq = min(seq_len, model.max_positions or seq_len)  # gpt2 has 1024 learned positions
        for mb in MICRO_BATCHES:
            for ac in (False, True):
                run = Run(model, gpus, "zero2", micro_batch=mb, seq_len=seq, checkpointing="full" if ac else "none")
                pred = predict(run, slow, profile)
                if pred.fits:
                    found = (run, pred)
                    break
            if found:
                break
        if found is None:
            rows.append([model.name, f"{model.params / 1e9:.2f}B", "does not fit", "-", "-", "-", "-", "no"])
            values.append({"model": model.name, "params": model.params, "fits": False})
            continue
        run, pred = found
        ref = predict(run, fast, profile)
        wait_s = network_wait_s(pred)
        wait = wait_s / pred.step_time_s
        practical = wait < PRACTICAL_WAIT
        # the work per GPU per step at which the GPUs wait half the step: the rest of the step grows
        # with the tokens, the network's part does not
        tokens = run.micro_batch * run.seq_len
        breakeven = tokens * wait_s / (pred.step_time_s - wait_s) if pred.step_time_s > wait_s else None
        if not practical and first_impractical is None:
            first_impractical = model
        ac = " +AC" if run.activation_checkpointing else ""
        rows.append([model.name, f"{model.params / 1e9:.2f}B", f"{run.micro_batch} x {run.seq_len}{ac}",
                     f"{pred.tokens_per_s_per_gpu:,.0f}", f"{wait:.0%}",
                     f"{pred.tokens_per_s / ref.tokens_per_s:.0%}",
                     "-" if breakeven is None else f"{breakeven:,.0f}", "yes" if practical else "no"])
        values.append({"model": model.name, "params": model.params, "fits": True, "micro_batch": run.micro_batch,
                       "seq_len": run.seq_len, "activation_checkpointing": run.activation_checkpointing,
                       "tokens_per_s_per_gpu": pred.tokens_per_s_per_gpu, "network_wait_fraction": wait,
                       "vs_reference": pred.tokens_per_s / ref.tokens_per_s, "breakeven_tokens": breakeven,
                       "tokens_per_step": tokens, "practical": practical})
    ok = [v for v in values if v.get("practical")]
    if first_impractical is None:
        sentence = (f"yes, for every size here: ZeRO-2 on {Q2_NODES}x {Q2_NODE} over {Q2_NETWORK} keeps the network "
                    f"wait under {PRACTICAL_WAIT:.0%} up to {specs[-1].name}.")
    elif not ok:
        sentence = (f"no: even {specs[0].name} ({specs[0].params / 1e6:,.0f}M parameters) waits on {Q2_NETWORK} "
                    f"{values[0].get('network_wait_fraction', 1):.0%} of its step on {Q2_NODES}x {Q2_NODE}"
                    + _breakeven_clause(values) + ".")
    else:
        last = ok[-1]
        sentence = (f"up to {last['model']} ({last['params'] / 1e9:.2f}B parameters, "
                    f"{last['network_wait_fraction']:.0%} waiting); it stops being practical at "
                    f"{first_impractical.name} ({first_impractical.params / 1e9:.2f}B), where the GPUs wait more "
                    f"than {PRACTICAL_WAIT:.0%} of the step.")
    return Answer("gigabit", title, (sentence,),
                  ((f"zero2 on {Q2_NODES}x {Q2_NODE} ({slow.num_gpus} GPUs) over {Q2_NETWORK}, one port per node; "
                    f"sequence {seq_len}; vs {Q2_REFERENCE}: tokens/s against the same job over {Q2_REFERENCE}",
                    ["model", "parameters", "micro-batch x seq", "tokens/s/GPU", "network wait", f"vs {Q2_REFERENCE}",
                     "tokens/GPU/step for 50%", "practical"], rows),),
                  (f"practical: the GPUs wait on the network under {PRACTICAL_WAIT:.0%} of the step (a definition "
                   "made here, not a published threshold); the largest micro-batch of 8, 4, 2, 1 that fits",),
                  {"rows": values})


def _breakeven_clause(values) -> str:
    fit = [v for v in values if v.get("fits") and v.get("breakeven_tokens")]
    if not fit:
        return ""
    lo, hi = min(v["breakeven_tokens"] for v in fit), max(v["breakeven_tokens"] for v in fit)
    most = max(v["tokens_per_step"] for v in fit)
    small, big = min(v["params"] for v in fit), max(v["params"] for v in fit)
    return (f". The bytes per step grow with the parameters as the compute per token does, so the work per GPU "
            f"per step that would bring the wait under half moves {hi / lo:.1f}x across a {big / small:.0f}x range "
            f"of sizes: {lo:,.0f} to {hi:,.0f} tokens (micro-batch x sequence), against at most {most:,} that fit "
            "in memory here")


def answer_all(models, *, seq_len: int = 4096, micro_batch: int = 1, profile=None,
               prices: Prices | None = None) -> tuple[Answer, ...]:
    """The four answers for `models` (two sizes, the study's model first)."""
    if not models:
        raise UsageError("the network questions need at least one model")
    return (infiniband_worth_it(models, seq_len=seq_len, micro_batch=micro_batch, profile=profile, prices=prices),
            zero2_over_gigabit(seq_len=seq_len, profile=profile),
            racks_apart(models, seq_len=seq_len, micro_batch=micro_batch, profile=profile),
            across_regions(models, seq_len=seq_len, micro_batch=micro_batch, profile=profile, prices=prices))


def blocks(answers, heading: str = "h2") -> list[tuple]:
    """Report blocks (render.py's kinds): a heading per question, its answers, its tables, its notes."""
    sub = "h3" if heading == "h2" else "h4"
    out: list[tuple] = [(heading, "Networks: four questions")]
    out.append(("p", "Predicted by the cost model, not measured; each sentence is computed from the table under "
                     "it. Network wait: the share of the step the GPUs spend on exposed communication between "
                     "nodes."))
    for a in answers:
        out.append((sub, a.title))
        out.append(("ul", list(a.sentences)))
        capped = False
        for caption, headers, rows in a.tables:
            out.append(("p", caption + ":"))
            rows, marked = with_socket_cap(headers, rows)
            capped = capped or marked
            out.append(("table", headers, rows))
        for note in a.notes:
            out.append(("p", note + "."))
        if capped:
            out.append(("p", f"{SOCKET_CAP_NOTE[0].upper()}{SOCKET_CAP_NOTE[1:]}."))
    return out
