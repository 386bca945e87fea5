"""Tables on an 80-column screen and in a pipe: no line over the width, the columns that answer the question
kept, --wide for every column; an export alone on stdout; `plan` where nothing fits exits 1 in one line."""

from __future__ import annotations

import json

import pytest

from tests.unit.cli_run import cli_output

CLUSTER = "4x hgx-h100-8+ib-ndr"


@pytest.fixture(params=["pipe", "COLUMNS=80"])
def screen(request, monkeypatch):
    """A pipe (no COLUMNS: 80 columns) or COLUMNS=80; capsys's stdout is not a terminal either way."""
    if request.param == "pipe":
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", "80")
    return 80


def header_line(text: str, *words: str) -> str:
    """The first line that holds every word (a table's header)."""
    return next(line for line in text.splitlines() if all(w in line for w in words))


def assert_fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"{len(long)} lines over {width} columns, e.g. {long[0]!r}"


def test_whatif_networks_table_keeps_its_answer_at_80_columns(screen, capsys):
    code, out, _ = cli_output(["plan", "--model", "llama3.1-8b", "--topology", CLUSTER, "--network",
                               "ib-ndr,roce-400,eth-100,eth-10"], capsys)
    assert code == 0
    assert_fits(out)
    head = header_line(out, "network", "strategy", "tokens/s", "step ms")
    for name in ("ib-ndr", "roce-400", "eth-100", "eth-10"):
        row = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert len(row.split()) >= 6  # a row of the table, not a record's line
    assert "left out to fit 80 columns" in out and "USD/h" in out.split(head)[1]  # the hidden ones named


def test_wide_shows_every_column(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = cli_output(["plan", "--model", "llama3.1-8b", "--topology", CLUSTER, "--network",
                               "ib-ndr,eth-100", "--wide"], capsys)
    assert code == 0 and "left out" not in out
    assert max(map(len, out.splitlines())) > 80
    assert "/node" in header_line(out, "network", "strategy", "tokens/s") and "USD/h" in out


def test_columns_wider_than_the_table_print_it_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli_output(["plan", "--model", "llama3.1-8b", "--topology", CLUSTER, "--network",
                               "ib-ndr,eth-100"], capsys)
    assert code == 0 and "left out" not in out and "USD/h" in out


def test_plan_table_at_80_columns(screen, capsys):
    code, out, _ = cli_output(["plan", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--compile"], capsys)
    assert code == 0
    assert_fits(out)
    head = header_line(out, "strategy", "GPUs")
    for key in ("step ms", "tokens/s", "peak GiB"):
        assert key in head


def test_plan_turns_to_records_where_even_the_key_columns_do_not_fit(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    code, out, _ = cli_output(["plan", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--top", "2"], capsys)
    assert code == 0
    assert_fits(out, 40)
    # one block per plan: a line per column, its header first
    assert [line.split()[0] for line in out.splitlines() if line.startswith("#")] == ["#", "#"]
    assert sum(line.startswith("tokens/s ") for line in out.splitlines()) == 2


def test_plan_mesh_table_at_80_columns_has_the_mesh(screen, capsys):
    code, out, _ = cli_output(["plan", "--mesh", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--top", "4"],
                              capsys)
    assert code == 0
    assert_fits(out)
    head = header_line(out, "mesh", "strategy")
    assert all(key in head for key in ("step s", "tokens/s", "peak GiB"))
    rows = out.split(head)[1].splitlines()[2:6]
    assert all(row.split()[0].startswith(("tp", "pp", "cp", "-")) for row in rows)


def test_export_alone_on_stdout(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli_output(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                                 "--export", "deepspeed"], capsys)
    assert code == 0
    assert "zero_optimization" in json.loads(out)  # `plan --export deepspeed > ds.json` is valid JSON
    assert "tokens/s" in err and "why" in err  # the ranking and the reasons went to stderr
    assert_fits(err)


def test_nothing_fits_exits_1_with_one_line(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli_output(["plan", "--model", "llama3.1-70b", "--topology", "pcie-l40s-8", "--num-gpus", "1"],
                                capsys)
    assert code == 1
    line, = err.splitlines()
    assert line.startswith("topowise: nothing fits llama3.1-70b on 1 GPU of pcie-l40s-8")
    assert "GiB" in line and "more nodes" in line and "Traceback" not in err
    assert "not modelled" not in out + err
    # a smaller micro-batch and more GPUs are said where they would help
    code, _, err = cli_output(["plan", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                               "--micro-batch", "64", "--json"], capsys)
    assert code == 1 and "--num-gpus" in err and "smaller --micro-batch" in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def tiny_study():
    from topowise.models.spec import load_model
    from topowise.report import study as st
    from topowise.topology.presets import load_preset

    return st.run_study(load_model("tiny"), [(n, load_preset(n)) for n in ("hgx-h100-8", "h100-nvl-8")], seq_len=256)


def test_study_summary_at_80_columns(screen, capsys, tiny_study):
    from topowise.report.render import print_summary

    print_summary(tiny_study, {})
    out = capsys.readouterr().out
    assert_fits(out)
    head = header_line(out, "topology", "strategy", "GPUs")
    assert "tokens/s" in head and "peak GiB" in head
    rows = out.split(head)[1].splitlines()[2:4]
    assert [row.split()[0] for row in rows] == ["hgx-h100-8", "h100-nvl-8"]  # the topology names whole
    assert "fits" in header_line(out, "strategy", "tokens/s", "peak GiB")  # the per-topology tables
    print_summary(tiny_study, {}, wide=True)
    assert "checkpointing" in header_line(capsys.readouterr().out, "topology", "strategy", "GPUs")


def test_nccl_tests_compare_at_80_columns(screen, capsys):
    from pathlib import Path

    a100 = Path(__file__).parents[1] / "data" / "nccl_tests" / "a100x24-4hdr_nccl-tests-119.txt"
    argv = ["nccl-tests", "--topology", "3x dgx-a100-8+ib-hdrx4", "-g", "24", "--compare", str(a100)]
    code, out, _ = cli_output(argv, capsys)
    assert code == 0
    assert_fits(out)
    head = header_line(out, "size (B)", "op")
    assert head.startswith("#") and all(k in head for k in ("measured", "expected", "ratio", "verdict"))
    assert out.split(head)[1].split()[:2] == ["127926280", "all_reduce"]
    code, wide, _ = cli_output([*argv, "--wide"], capsys)
    assert "algorithm" in header_line(wide, "size (B)", "op") and max(map(len, wide.splitlines())) > 80


def write_monitor_run(folder, world: int) -> None:
    """StepMonitor files of `world` ranks: rank 1 started step 9 250 ms late, the others waited; rank 3's GPU
    ran slow."""
    for rank in range(world):
        lines = [{"kind": "start", "rank": rank, "world_size": world, "collective": "the gradient all-reduce",
                  "predicted_step_s": 0.1}]
        for step in range(12):
            slow = step == 9
            times = [0.1 if slow and r == 1 else 0.35 if slow else 0.1 for r in range(world)]
            waits = [0.25 if slow and r != 1 else 0.0 for r in range(world)]
            lines.append({"kind": "step", "step": step, "rank": rank, "world_size": world, "judged": step >= 3,
                          "step_time_s": times[rank], "wait_s": waits[rank], "slowest_rank": 1 if slow else 0,
                          "slow_by_s": 0.25 if slow else 0.0, "late_at": "start",
                          "collective": "the gradient all-reduce", "step_times_s": times, "waits_s": waits,
                          "spike": {"step_time": slow and rank != 1, "wait": slow and rank != 1},
                          "sm_mhz": [1750.0] * (world - 1) + [1300.0], "clock_reasons": [0x4] * (world - 1) + [0x24]})
        (folder / f"monitor.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_monitor_summarize_at_80_columns(screen, capsys, tmp_path):
    write_monitor_run(tmp_path, world=4)
    code, out, _ = cli_output(["monitor", "summarize", str(tmp_path), "--no-plot"], capsys)
    assert code == 0
    assert_fits(out)
    ranks = header_line(out, "rank", "steps", "step ms")
    assert all(k in ranks for k in ("spike steps", "all ms", "MHz"))  # the headers' second lines
    steps = header_line(out, "step", "rank", "late at")
    assert out.split(steps)[1].splitlines()[2].split()[:2] == ["9", "1"]  # step 9's slow rank
    code, wide, _ = cli_output(["monitor", "summarize", str(tmp_path), "--no-plot", "--wide"], capsys)
    assert "rank 3" in wide and max(map(len, wide.splitlines())) > 80

    # plan --mesh where no mesh fits: the same exit and one line
    code, _, err = cli_output(["plan", "--mesh", "--model", "llama3.1-405b", "--topology", "hgx-h100-8"], capsys)
    assert code == 1 and err.startswith("topowise: nothing fits llama3.1-405b") and err.count("\n") == 1
