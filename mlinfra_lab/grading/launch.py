"""Start a sandbox's first process under its limits, with no Python run between fork and exec.

Contract: ``launcher(argv, limits)`` returns a command line that, run by `subprocess`,
puts its own process into the control groups of `limits` (writing its pid into each
``cgroup.procs`` file), sets ``RLIMIT_AS``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE`` and
``RLIMIT_CORE``, drops to the throwaway user where one is given (``setgroups([])``,
``setgid``, ``setuid``: last, because joining a group needs root), and then execs `argv`
in the same process. A step that fails ends the launcher with exit status 126 and one
line on stderr naming the step; `argv` then never runs.

Design decisions:
- Why not ``preexec_fn``: the grader drives ``--jobs`` kernels from threads, and Python's
  documentation says ``preexec_fn`` is not safe in the presence of threads (the forked
  child runs Python code, and may wait forever on a lock another thread held at fork
  time). A launcher is an ordinary program: `subprocess` forks and execs it with no Python
  code in between, and it runs single-threaded. (The crash CI saw in ``--jobs 2`` batches
  was another thread hazard, in ``ast.parse``: see `pyparse`.)
- It is this file run as a script by the grader's own interpreter with ``-I -S`` (isolated:
  no ``PYTHON*`` variables, no user site, no current folder on the path; no ``site``: it
  imports only ``os``, ``resource`` and ``sys`` and starts in about 10 ms). Nothing a
  submission can write is on its path, and it needs no installed package to find.
- The limits travel as options (``--as N``, ``--nproc N``, ``--fsize N``, ``--cgroup FILE``,
  ``--uid N``) before ``--``, and `argv` after it unchanged, so no quoting is involved.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["LAUNCH_FAILED", "Limits", "launcher"]

LAUNCH_FAILED = 126  # the launcher's exit status when a step fails (the shell's "cannot run")


@dataclass(frozen=True)
class Limits:
    """What the launcher applies before it execs the sandbox's command."""

    fsize: int  # RLIMIT_FSIZE: the largest file the sandbox may write
    memory: int | None = None  # RLIMIT_AS of each process (None: no address-space limit)
    nproc: int | None = None  # RLIMIT_NPROC (tasks of the user it runs as)
    uid: int | None = None  # the throwaway user to become (None: keep this one)
    cgroup_procs: tuple[str, ...] = field(default=())  # cgroup.procs files to join


def launcher(argv: Sequence[str], limits: Limits) -> list[str]:
    """The command line that applies `limits` and then execs `argv` (see the module
    docstring)."""
    if not argv:
        raise ValueError("launcher() needs a command to run after the limits are set")
    cmd = [sys.executable, "-I", "-S", os.path.abspath(__file__), "--fsize", str(limits.fsize)]
    if limits.memory is not None:
        cmd += ["--as", str(int(limits.memory))]
    if limits.nproc is not None:
        cmd += ["--nproc", str(int(limits.nproc))]
    for path in limits.cgroup_procs:
        cmd += ["--cgroup", str(path)]
    if limits.uid is not None:
        cmd += ["--uid", str(int(limits.uid))]
    return [*cmd, "--", *argv]


def _fail(step: str, err: BaseException) -> None:
    sys.stderr.write(f"mlinfra-lab launcher: {step} failed ({type(err).__name__}: {err})\n")
    sys.stderr.flush()
    os._exit(LAUNCH_FAILED)


def _main(args: list[str]) -> None:
    if "--" not in args or args.index("--") == len(args) - 1:
        _fail("reading the command line", ValueError("usage: launch.py [OPTIONS] -- COMMAND"))
    split = args.index("--")
    options, argv = args[:split], args[split + 1 :]
    cgroups, values = [], {}
    for name, value in zip(options[::2], options[1::2], strict=True):
        if name == "--cgroup":
            cgroups.append(value)
        else:
            values[name] = int(value)
    for path in cgroups:  # first, so every later process of the sandbox is counted
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        except OSError as err:
            _fail(f"joining the control group {path}", err)
    rlimits = [("--as", resource.RLIMIT_AS), ("--nproc", resource.RLIMIT_NPROC)]
    rlimits += [("--fsize", resource.RLIMIT_FSIZE)]
    for name, which in rlimits:
        if name in values:
            try:
                resource.setrlimit(which, (values[name], values[name]))
            except (OSError, ValueError) as err:
                _fail(f"setting {name[2:]}", err)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if "--uid" in values:  # root itself is exempt from RLIMIT_NPROC; this user is not
            os.setgroups([])
            os.setgid(values["--uid"])
            os.setuid(values["--uid"])
    except OSError as err:
        _fail("dropping to the throwaway user", err)
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        _fail(f"starting {argv[0]}", err)


if __name__ == "__main__":
    _main(sys.argv[1:])
