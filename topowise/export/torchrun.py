"""torchrun: the command line and environment that run a plan on one node.

`launch_config` is the pure function `topowise launch` runs (argv, env); `torchrun_script` is the same
as shell text to paste.
"""

from __future__ import annotations

import shlex

from topowise.errors import UsageError
from topowise.export import multinode
from topowise.export.plan import LaunchPlan

PYTHONS = ("python", "python3")


def script_args(command: list[str] | tuple[str, ...]) -> list[str]:
    """What follows torchrun's own flags: a script, `-m module`, or `--no-python CMD` for anything else.

    A script or `-m module` runs in torchrun's Python; a command that names its interpreter
    (`python train.py`) keeps it and runs as written, under `--no-python`.
    """
    cmd = list(command)
    if not cmd:
        raise UsageError("no command to run: put it after `--`, e.g. `topowise launch --plan p.json -- train.py`")
    if cmd[0].rsplit("/", 1)[-1] in PYTHONS and len(cmd) == 1:
        raise UsageError("`python` alone is not a training command: give the script or `-m module` after it")
    if cmd[0] == "-m" or cmd[0].endswith(".py"):
        return cmd
    return ["--no-python", *cmd]


def torchrun_argv(plan: LaunchPlan, command, torchrun: tuple[str, ...] = ("torchrun",), flags=(),
                  wrap=()) -> list[str]:
    """One node, a local c10d store (`--standalone`), one process per planned GPU; `flags` go to torchrun,
    `wrap` (a command that execs the rest, e.g. a NUMA binder) before the training command."""
    return [*torchrun, "--standalone", "--nnodes=1", f"--nproc-per-node={plan.nproc}", *flags,
            *script_args(wrapped(command, wrap))]


def wrapped(command, wrap) -> list[str]:
    """`wrap` before the command; a script or `-m module` then names the Python that torchrun would have used."""
    cmd = list(command)
    if not wrap or not cmd:
        return cmd
    if cmd[0] == "-m" or cmd[0].endswith(".py"):
        cmd = [wrap[0], *cmd]  # wrap[0] is that Python
    return [*wrap, *cmd]


def launch_config(plan: LaunchPlan, command, torchrun: tuple[str, ...] = ("torchrun",), *, flags=(), wrap=(),
                  extra_env=None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) for os.execvpe: env is what to set on top of the caller's environment; `extra_env` (the
    binding, the flight recorder) on top of the plan's."""
    if plan.num_nodes > 1:
        raise UsageError(f"the plan spans {plan.num_nodes} nodes: start it on every node with "
                         "`topowise plan ... --export torchrun` (one command per node) or `--export slurm`")
    env = {**plan.env, **plan.settings_env, **(extra_env or {})}
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun sets 1 with a warning anyway; say it here
    return torchrun_argv(plan, command, torchrun, flags, wrap), env


def shell_line(argv: list[str], env: dict[str, str]) -> str:
    """`VAR=value ... cmd args`, each word quoted for a POSIX shell."""
    assignments = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join(assignments + [shlex.join(argv)])


def settings_note(plan: LaunchPlan) -> str:
    """The comment that says how the training script reads the TOPOWISE_* variables."""
    saved = "" if plan.plan_path else "; `plan --save-plan FILE` adds TOPOWISE_PLAN=FILE (the whole plan)"
    return f"the script reads TOPOWISE_* with topowise.export.read_plan() (docs/launch.md){saved}"


def torchrun_script(plan: LaunchPlan, command=("train.py",)) -> str:
    if plan.num_nodes > 1:
        env = {**plan.env, **plan.settings_env, "OMP_NUM_THREADS": "1"}
        return multinode.torchrun_per_node(plan.num_nodes, plan.nproc_per_node, script_args(command), env,
                                           plan.summary(), plan.warnings,
                                           multinode.network_notes(plan.network, env) + plan.nccl_notes
                                           + [settings_note(plan)])
    argv, env = launch_config(plan, command)
    lines = [f"# topowise plan: {plan.summary()}"]
    lines += [f"# warning: {w}" for w in plan.warnings]
    lines.append(f"# {settings_note(plan)}")
    lines.append(shell_line(argv, env))
    return "\n".join(lines) + "\n"
