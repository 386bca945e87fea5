"""`topowise nccl-tests`: the busbw nccl-tests should show on a topology, in nccl-tests' own layout;
with --compare, a pasted nccl-tests output beside it, the sizes that fall short and their usual causes."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from topowise.cli.flags import add_wide_argument
from topowise.errors import UsageError

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.IGNORECASE | re.ASCII)
DEFAULT_OPS = "all_reduce,all_gather,reduce_scatter,broadcast"
DEFAULT_SIZES = ("8", "8G", 2)  # the expected table: 8 B to 8 GiB, doubling (nccl-tests -b 8 -e 8G -f 2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", required=True, metavar="T",
                        help="a preset, a cluster such as '2x hgx-h100-8+ib-ndr', or a topology file")
    parser.add_argument("--num-gpus", "-g", type=int, metavar="K",
                        help="ranks in the test (default: every GPU; with --compare: the output's rank count)")
    parser.add_argument("--ops", metavar="LIST",
                        help=f"collectives to tabulate ({DEFAULT_OPS})")
    parser.add_argument("--min-bytes", "-b", metavar="SIZE", help=f"smallest size, e.g. 8, 1M ({DEFAULT_SIZES[0]})")
    parser.add_argument("--max-bytes", "-e", metavar="SIZE", help=f"largest size, e.g. 8G ({DEFAULT_SIZES[1]})")
    parser.add_argument("--step-factor", "-f", type=int, metavar="F", help=f"size multiplier ({DEFAULT_SIZES[2]})")
    parser.add_argument("--compare", metavar="FILE",
                        help="nccl-tests output to set beside the expectation (`-` reads stdin)")
    parser.add_argument("--op", metavar="OP",
                        help="with --compare: the collective the output measured, when its text does not say; "
                             "without it: tabulate this one collective (as --ops OP)")
    parser.add_argument("--algo", choices=("auto", "ring", "tree"), default="auto",
                        help="across nodes, the algorithm NCCL_ALGO forced in the run (auto: NCCL's tuner picks)")
    parser.add_argument("--fabric", choices=("nvlink", "pcie"), default="nvlink",
                        help="pcie: GPU-to-GPU traffic through the host at PCIe rate, as NCCL_P2P_DISABLE=1 runs it "
                             "(default nvlink: P2P over NVLink where the GPUs have it)")
    parser.add_argument("--nvls", choices=("on", "off"),
                        help="NVLink SHARP on NVSwitch boards (NVLS inside a node, NVLS-Tree across nodes): off as "
                             "NCCL_NVLS_ENABLE=0 runs; default: NCCL's own, on where the board has it")
    parser.add_argument("--gpu-name", metavar="NAME", help="GPU model for `nvidia-smi topo -m` text")
    parser.add_argument("--profile", metavar="FILE", help="a calibrated profile (topowise calibrate)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_wide_argument(parser)


def parse_size(text: str, flag: str) -> int:
    """nccl-tests' sizes: a number with an optional K, M, G or T (powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"{flag} {text!r}: give bytes, optionally with K, M, G or T (e.g. 8, 128M, 8G)")
    return int(m.group(1)) * 1024 ** "_KMGT".index(m.group(2).upper() or "_")


def table_ops(text: str | None, op: str | None) -> list[str]:
    """The collectives of the expected table: --ops, or --op's one (not both), else the four modelled."""
    from topowise.costmodel.profile import OPS

    if op is not None:
        if text is not None:
            raise UsageError("--op and --ops both name the collectives to tabulate: give one of them")
        if op not in OPS:
            raise UsageError(f"--op {op}: no expectation is modelled for it; give one of {', '.join(OPS)}")
        return [op]
    text = DEFAULT_OPS if text is None else text
    ops = [o.strip().replace("-", "_") for o in text.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise UsageError(f"--ops {text!r}: give some of {', '.join(OPS)}")
    return ops


def refuse_algo_in_one_node(algo: str, nodes: int) -> None:
    """--algo forces NCCL_ALGO across nodes (nccltests prices it there); inside one node the ring is priced."""
    if algo != "auto" and nodes < 2:
        raise UsageError(f"--algo {algo} applies across nodes, and these ranks run on one node (where the "
                         "expectation is NCCL's ring, or NVLS where the board has it): drop --algo, or give a "
                         "cluster (e.g. --topology '2x hgx-h100-8+ib-ndr')")


def refuse_table_flags(args: argparse.Namespace) -> None:
    """With --compare the output sets the collective and the sizes: the expected table's flags would do nothing."""
    for flag, value in (("--ops", args.ops), ("--min-bytes", args.min_bytes), ("--max-bytes", args.max_bytes),
                        ("--step-factor", args.step_factor)):
        if value is not None:
            raise UsageError(f"{flag} shapes the expected table; with --compare the output's own collective and "
                             f"sizes are compared: drop {flag} (--op names the output's collective)")


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "stdin"
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace"), path
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None


def run(args: argparse.Namespace) -> int:
    from topowise import nccltests
    from topowise.costmodel.profile import default_profile
    from topowise.costmodel.profile_store import resolve_profile
    from topowise.topology import load_topology

    topo = load_topology(args.topology, args.gpu_name)
    profile = resolve_profile(args.profile, [topo.gpus[0].name])
    topo, profile = nccltests.with_settings(topo, profile or default_profile(), args.fabric, args.nvls)
    op = args.op.replace("-", "_") if args.op else None
    if op is not None and op not in nccltests.NCCL_TESTS_OPS:
        raise UsageError(f"--op {args.op!r}: give the collective of an nccl-tests binary "
                         f"({', '.join(nccltests.NCCL_TESTS_OPS)})")
    if args.compare:
        refuse_table_flags(args)
        text, where = _read(args.compare)
        measured = nccltests.parse_output(text, where, op)
        result = nccltests.compare(measured, topo, args.num_gpus, profile, args.algo)
        refuse_algo_in_one_node(args.algo, result["nodes"])
        if args.json:
            data = dict(result, rows=[r.to_dict() for r in result["rows"]], measured=measured.to_dict(), source=where)
            print(json.dumps(data, indent=2))
        elif args.wide:
            print(nccltests.render_comparison(result, measured, where), end="")
        else:
            show_comparison(result, measured, where)
        return 0
    low, high, factor = (default if given is None else given for given, default in
                         zip((args.min_bytes, args.max_bytes, args.step_factor), DEFAULT_SIZES))
    sizes = nccltests.sweep_sizes(parse_size(low, "--min-bytes"), parse_size(high, "--max-bytes"), factor)
    table = nccltests.expected_table(topo, table_ops(args.ops, op), sizes, args.num_gpus, profile, args.algo)
    refuse_algo_in_one_node(args.algo, table["nodes"])
    if args.json:
        data = dict(table, tables={op: [r.to_dict() for r in rows] for op, rows in table["tables"].items()})
        print(json.dumps(data, indent=2))
    else:
        print(nccltests.render_expected(table, sizes, factor), end="")
    return 0


def show_comparison(result: dict, measured, source: str) -> None:
    """nccltests.render_comparison's lines fitted to the screen: `#` lines wrapped, the table through
    print_table (the algorithm column left out first), the sizes that fall short and the hints wrapped."""
    from topowise.cli.console import Col, print_table, prose, screen_console
    from topowise.nccltests import float_str, render_comparison

    out = screen_console()
    text = render_comparison(result, measured, source)
    if max(map(len, text.splitlines())) <= out.width:  # it fits as it is
        print(text, end="")
        return
    gpu = f" x {measured.gpu_name}" if measured.gpu_name else ""
    prose(out, f"{source}: {result['ranks']} ranks{gpu} beside {result['topology']} ({result['nodes']} "
               f"node{'s' if result['nodes'] > 1 else ''}); busbw in GB/s, the better of out-of-place and in-place",
          "# ", "# ")
    # the empty first column puts nccl-tests' "#" before the header row
    cols = [Col("#"), Col("size (B)", "right"), Col("op", "right"), Col("measured", "right"),
            Col("expected", "right"), Col("ratio", "right"), Col("verdict", "right"),
            Col("algorithm", "right", key=False), Col("bound")]
    rows = [["", str(r.bytes), r.op, float_str(r.measured_busbw_gbps, 8).strip(),
             float_str(r.expected_busbw_gbps, 8).strip(), f"{r.ratio:.2f}", r.verdict, r.algorithm, r.bound]
            for r in result["rows"]]
    print_table(out, cols, rows, box=None, pad_edge=False)
    for line in text.splitlines()[2 + len(result["rows"]):]:  # short sizes, skipped ops, hints: prose
        prose(out, line, "", "  ")
