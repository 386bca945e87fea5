"""The CLI run in this process, as the tests call it: exit status and what it printed."""

from topowise.cli.main import main


def cli_output(argv, capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr); argparse's own errors exit through SystemExit."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    """(exit status, stderr lines)."""
    code, _, err = cli_output(argv, capsys)
    return code, err.strip().splitlines()
