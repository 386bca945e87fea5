"""`topowise launch`: run a command under torchrun with a plan's GPUs and environment.

    topowise launch --plan plan.json -- train.py --lr 3e-4
    topowise launch --model llama3.1-8b --topology h100-nvl-8 --num-gpus 2 --dry-run -- train.py

The argv and environment come from `export.torchrun.launch_config` (a pure function); this module
only replaces itself with torchrun (os.execvpe, never a shell), run through topowise.measure.torchrun
so that the exit status is the failed rank's own. The caller's environment passes through,
NCCL_NVLS_ENABLE and other switches included; the plan's variables go on top, and with them what the
doctor found (topowise.doctor.bind: each rank on its GPU's NUMA node, NCCL_IB_HCA where the NICs' names run
against PCI order) and PyTorch's flight recorder dumping into the run folder (docs/launch.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from topowise.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from topowise.cli.plan import add_plan_arguments

    parser.add_argument("--plan", metavar="FILE", help="a plan from `topowise plan --save-plan FILE`")
    add_plan_arguments(parser, required=False)
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    parser.add_argument("--snapshot", metavar="FILE",
                        help="bind from a saved `doctor --save-snapshot` instead of reading this machine")
    parser.add_argument("--no-bind", action="store_true",
                        help="no NUMA binding and no NCCL_IB_HCA from the doctor's reading")
    parser.add_argument("--run-dir", metavar="DIR",
                        help="the run folder: flight-recorder dumps (`monitor hang DIR`) and the plan "
                             "(default runs/launch-<UTC time>)")
    parser.add_argument("--no-flight-recorder", action="store_true",
                        help="leave PyTorch's flight recorder off (TORCH_NCCL_TRACE_BUFFER_SIZE and the dump)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                        help="the training command, after --")


def launch_plan_from_args(args: argparse.Namespace):
    """A LaunchPlan from --plan FILE, or planned now from the plan flags."""
    from topowise.export import LaunchPlan, load_plan_file

    if args.plan:
        given = [f for f in ("model", "topology", "num_gpus", "gpus", "micro_batch", "profile") if getattr(args, f)]
        if given:
            raise UsageError(f"--plan already says what to run; drop --{given[0].replace('_', '-')}")
        return load_plan_file(args.plan)
    if not (args.model and args.topology):
        raise UsageError("give --plan FILE, or --model and --topology to plan now")
    from topowise.cli.plan import plan_from_args

    result, topo = plan_from_args(args, top=1)
    if result.best is None:
        raise UsageError(f"nothing fits, so there is nothing to launch: {result.suggestion}")
    return LaunchPlan.from_plan(result.best, result, topo)


def command_of(args: argparse.Namespace) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd


def torchrun_prefix() -> tuple[str, ...]:
    """This Python's torchrun, through topowise.measure.torchrun so that a failed rank's exit status
    comes back unchanged (torchrun alone exits 1); else `torchrun` on PATH (another environment's
    PyTorch); else a one-line error rather than Python's "Error while finding module specification"."""
    from topowise.measure.launcher import TORCH_INSTALL_HINT, have_torch

    if have_torch():
        return (sys.executable, "-m", "topowise.measure.torchrun")
    if shutil.which("torchrun"):
        return ("torchrun",)
    raise UsageError(f"launch runs torchrun, which comes with PyTorch, and this Python has none: {TORCH_INSTALL_HINT} "
                     "(--dry-run prints the command without it)")


def check_command_exists(command: list[str]) -> None:
    """The program or script torchrun would start exists: else every rank fails in torchrun's traceback."""
    if not command or command[0] == "-m":
        return  # no command is refused by launch_config; a module is found by its own Python
    head = command[0]
    if head.endswith(".py"):
        if not os.path.isfile(head):
            raise UsageError(f"cannot launch {head}: no such script")
        return
    if os.sep in head:
        if not os.path.isfile(head) or not os.access(head, os.X_OK):
            raise UsageError(f"cannot launch {head}: " + ("not executable" if os.path.isfile(head) else "no such file"))
    elif shutil.which(head) is None:
        raise UsageError(f"cannot launch {head}: not found on PATH")


def binding_of(args: argparse.Namespace, plan):
    """What the doctor found, bound: from --snapshot FILE or this machine; none with --no-bind."""
    from topowise.doctor import bind

    if args.no_bind and args.snapshot:
        raise UsageError("--snapshot is read for the NUMA binding that --no-bind turns off: give one of them")
    if args.no_bind:
        return bind.Binding(notes=("--no-bind: no NUMA binding, NCCL_IB_HCA as the environment has it",))
    if args.snapshot:
        from topowise.doctor.snapshot import load

        snap = load(args.snapshot)
    else:
        from topowise.doctor.read import read

        snap = read()
    return bind.launch_binding(snap, plan.run.gpus, torch_numa=bind.torch_has_numa_binding(),
                               numactl=bind.have_numactl())


def run_dir_of(args: argparse.Namespace) -> str:
    import time

    run_dir = os.path.abspath(args.run_dir or os.path.join("runs", time.strftime("launch-%Y%m%d-%H%M%S",
                                                                                     time.gmtime())))
    # a file where the run folder (or a folder above it) belongs: refused now, dry run included, not at the
    # first flight-recorder dump
    above = next((p for p in (run_dir, *(str(q) for q in Path(run_dir).parents)) if os.path.lexists(p)), None)
    if above is not None and not os.path.isdir(above):
        raise UsageError(f"--run-dir {args.run_dir or run_dir}: " + ("a file, not a folder" if above == run_dir else
                                                                    f"{above} is a file, not a folder")
                         + ": give a folder (it is made if missing)")
    return run_dir


def run(args: argparse.Namespace) -> int:
    from topowise.doctor.bind import flight_recorder_env
    from topowise.export.torchrun import launch_config, shell_line

    plan = launch_plan_from_args(args)
    command = command_of(args)
    torchrun = ("torchrun",) if args.dry_run else torchrun_prefix()  # the launcher's lack is told first
    if not args.dry_run:  # a dry run prints the command for another machine, where it may exist
        check_command_exists(command)
    binding = binding_of(args, plan)
    run_dir = run_dir_of(args)
    extra = dict(binding.env)
    notes = list(binding.notes)
    if not args.no_flight_recorder:
        extra.update(flight_recorder_env(run_dir))
        notes.append(f"flight recorder on: a collective that times out dumps every rank's last calls into {run_dir}; "
                     f"`topowise monitor hang {run_dir}` names the rank that never entered it")
    saved_plan = ""
    if args.plan:
        plan = plan.with_path(args.plan)
    elif not args.dry_run:  # planned now: the script's TOPOWISE_PLAN is a copy in the run folder
        saved_plan = os.path.join(run_dir, "plan.json")
        plan = plan.with_path(saved_plan)
    argv, env = launch_config(plan, command, torchrun, flags=binding.flags, wrap=binding.wrap, extra_env=extra)
    for warning in plan.warnings:
        sys.stderr.write(f"topowise: warning: {warning}\n")
    for note in notes:
        sys.stderr.write(f"topowise: {note}\n")
    if args.dry_run:
        print(shell_line(argv, env))
        return 0
    _make_run_dir(run_dir, plan.to_json() + "\n" if saved_plan else None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, {**os.environ, **env})
    except OSError as exc:
        raise UsageError(f"cannot start {argv[0]}: {exc.strerror}") from None
    return 0  # not reached


def _make_run_dir(run_dir: str, plan_text: str | None) -> None:
    try:
        os.makedirs(run_dir, exist_ok=True)
        if plan_text is not None:
            with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as fh:
                fh.write(plan_text)
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot write there ({exc.strerror})") from None
