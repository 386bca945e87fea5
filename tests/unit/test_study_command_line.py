"""The report's "Reproduce:" line is a command that parses back to the same study."""

import shlex

import pytest

from topowise.cli.main import build_parser
from topowise.cli.study import _command_line, measure_steps


def parse(argv: list[str]):
    return build_parser("study").parse_args(argv)


@pytest.mark.parametrize("argv", [
    ["study"],
    ["study", "--topologies", "4x hgx-h100-8+ib-ndr,h100-nvl-8", "--network", "ib-ndr,eth-100",
     "--gpu-hour-usd", "2.5", "--network-node-hour-usd", "3", "--no-network-questions"],
    ["study", "--model", "llama3.2-1b", "--topologies", "topo file.txt", "--gpu-name", "H200", "--num-gpus", "2",
     "--seq-len", "2048", "--micro-batch", "2", "--profile", "p.json", "--questions-model", "llama3.1-8b"],
    ["study", "--measure", "--measure-model", "gpt2", "--measure-steps", "3", "--trace"],
], ids=["defaults", "network-prices", "file-and-shape", "measure"])
def test_reproduce_line_parses_back_to_the_same_study(argv):
    args = parse(argv)
    line = _command_line(args)
    assert line.startswith("topowise study ")
    again = parse(shlex.split(line)[1:])
    for flag in ("model", "topologies", "gpu_name", "num_gpus", "seq_len", "micro_batch", "profile", "measure",
                 "measure_model", "trace", "network", "gpu_hour_usd", "network_node_hour_usd", "questions_model",
                 "no_network_questions"):
        assert getattr(again, flag) == getattr(args, flag), flag
    assert measure_steps(again) == measure_steps(args)


def test_measure_line_names_the_defaults_it_ran_with():
    words = shlex.split(_command_line(parse(["study", "--measure"])))
    assert words[words.index("--measure-model") + 1] and words[words.index("--measure-steps") + 1].isdigit()
